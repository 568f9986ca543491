"""The master's TLS material: a CA of its own and a server certificate, or the site's.

Why a CA of its own rather than one self-signed certificate: agents pin the CA's public
key (MAC_MASTER_CA_SHA256, printed by `mac start master`), so the server certificate
can be made again (a new address, near its end) without a single agent changing
anything. The CA is made once and then only read: losing it, or making a new one,
would break every pin.

A site that has its own PKI gives MAC_TLS_CERT (its chain, server certificate first)
and MAC_TLS_KEY; agents then pin the top of that chain. `manage.py prepare_tls` runs
`prepare()` before each start of the proxy (docs/tls.md).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from contract.atomicfile import write_atomically
from contract.pinning import spki_sha256

CA_CERT = "ca.pem"  # what agents fetch (contract.pinning.CA_PATH) and pin
CA_KEY = "ca-key.pem"
SERVER_CERT = "server.pem"  # the chain nginx serves: server certificate, then the CA
SERVER_KEY = "server-key.pem"
CA_DAYS = 20 * 365
SERVER_DAYS = 2 * 365
# A server certificate with less left than this is made again at the next start.
RENEW_BEFORE = datetime.timedelta(days=60)
# Always in the server certificate: the master's own commands and its Prometheus
# reach the proxy on loopback.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class TlsError(Exception):
    """TLS material that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class TlsMaterial:
    """What nginx serves (cert, key), what agents fetch (ca) and its pin."""

    cert: Path
    key: Path
    ca: Path
    pin: str
    made: tuple[str, ...] = ()  # what this call made or replaced, for the log


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def wanted_names(names: Iterable[str]) -> list[str]:
    """The server certificate's names: the given ones (blanks and repeats dropped), then
    loopback's."""
    result: list[str] = []
    for name in [*names, *LOCAL_NAMES]:
        name = name.strip().strip("[]").lower()
        if name and name not in result:
            result.append(name)
    return result


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _same_key(cert: x509.Certificate, key) -> bool:
    der = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return cert.public_key().public_bytes(encoding, der) == key.public_key().public_bytes(
        encoding, der
    )


# --- the CA -----------------------------------------------------------------------------


_NO_USAGE = dict.fromkeys(
    (
        "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
        "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
    ),
    False,
)  # fmt: skip


def _make_ca(cluster: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    # P-256: the cheapest handshake that every client supports (bench/register_tls.py).
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"MAC master CA ({cluster})")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(**{**_NO_USAGE, "key_cert_sign": True, "crl_sign": True}),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    """The CA made at an earlier start; None on a first start. Never replaced when broken:
    a new CA would break every agent's pin, so that is the operator's choice."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not cert_path.exists() and not key_path.exists():
        return None
    fix = (
        f"restore both from a backup; or, to make a new CA (every agent then needs the new "
        f"pin), move {directory} away and start the master again"
    )
    for path in (cert_path, key_path):
        if not path.exists():
            raise TlsError(f"{path} is missing while {directory} holds the rest of the CA: {fix}.")
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise TlsError(f"the master's CA in {directory} cannot be read ({exc}): {fix}.") from None
    if not _same_key(cert, key):
        raise TlsError(f"{key_path} is not the key of {cert_path}: {fix}.")
    return cert, key


# --- the server certificate -------------------------------------------------------------


def _make_server(
    ca: x509.Certificate, ca_key, names: Sequence[str]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _server_problem(directory: Path, ca: x509.Certificate, names: Sequence[str]) -> str:
    """Why the server certificate must be made (again); "" when it is fine."""
    cert_path, key_path = directory / SERVER_CERT, directory / SERVER_KEY
    if not cert_path.exists() or not key_path.exists():
        return "none yet"
    try:
        cert = x509.load_pem_x509_certificates(cert_path.read_bytes())[0]
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return "unreadable"
    if not _same_key(cert, key):
        return "its key does not match"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not issued by this CA"
    if cert.not_valid_after_utc - _now() < RENEW_BEFORE:
        return f"ends on {cert.not_valid_after_utc:%Y-%m-%d}"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no names"
    missing = [name for name in names if _san(name) not in sans]
    if missing:
        return "new names: " + ", ".join(missing)
    return ""


def prepare_own(directory: Path, names: Iterable[str], cluster: str = "mac") -> TlsMaterial:
    """The master's CA (made on the first start, kept after) and a server certificate for
    `names` (made again only when missing, broken, near its end or lacking a name)."""
    wanted = wanted_names(names)
    made: list[str] = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        loaded = _load_ca(directory)
        if loaded is None:
            ca, ca_key = _make_ca(cluster)
            # The key first: a certificate without its key would stop the next start.
            write_atomically(directory / CA_KEY, _pem_key(ca_key), mode=0o600)
            write_atomically(directory / CA_CERT, _pem(ca))
            made.append(f"a new CA in {directory / CA_CERT}")
        else:
            ca, ca_key = loaded
        problem = _server_problem(directory, ca, wanted)
        if problem:
            cert, key = _make_server(ca, ca_key, wanted)
            write_atomically(directory / SERVER_KEY, _pem_key(key), mode=0o600)
            write_atomically(directory / SERVER_CERT, _pem(cert) + _pem(ca))
            made.append(f"a server certificate for {', '.join(wanted)} ({problem})")
    except OSError as exc:
        raise TlsError(
            f"cannot write the master's TLS material in {directory}: {exc.strerror or exc}; "
            "check that folder's owner (MAC_TLS_DIR, else <MAC_DATA_DIR>/tls)."
        ) from None
    return TlsMaterial(
        cert=directory / SERVER_CERT,
        key=directory / SERVER_KEY,
        ca=directory / CA_CERT,
        pin=spki_sha256(ca),
        made=tuple(made),
    )


def prepare_site(directory: Path, cert_file: str, key_file: str) -> TlsMaterial:
    """The site's own chain (MAC_TLS_CERT, server certificate first) and key (MAC_TLS_KEY),
    checked; the top of the chain is what agents fetch and pin."""
    if not cert_file or not key_file:
        given, missing = ("MAC_TLS_CERT", "MAC_TLS_KEY")
        if not cert_file:
            given, missing = missing, given
        raise TlsError(
            f"{given} is set but {missing} is not: give both (the chain and its key), or "
            "neither to let the master use its own CA."
        )
    cert_path, key_path = Path(cert_file).expanduser(), Path(key_file).expanduser()
    try:
        chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    except OSError as exc:
        reason = exc.strerror or exc
        raise TlsError(f"MAC_TLS_CERT={cert_file}: cannot read it ({reason}).") from None
    except ValueError:
        raise TlsError(f"MAC_TLS_CERT={cert_file} holds no PEM certificate.") from None
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise TlsError(f"MAC_TLS_KEY={key_file}: cannot read it ({exc.strerror or exc}).") from None
    except TypeError:
        raise TlsError(
            f"MAC_TLS_KEY={key_file} is encrypted; nginx needs it without a passphrase "
            "(openssl pkey -in KEY -out KEY.plain)."
        ) from None
    except ValueError:
        raise TlsError(f"MAC_TLS_KEY={key_file} holds no PEM private key.") from None
    if not _same_key(chain[0], key):
        raise TlsError(
            f"MAC_TLS_KEY={key_file} is not the key of the first certificate in "
            f"MAC_TLS_CERT={cert_file} ({chain[0].subject.rfc4514_string()}): give the "
            "matching pair, server certificate first in the chain."
        )
    if chain[0].not_valid_after_utc < _now():
        raise TlsError(
            f"MAC_TLS_CERT={cert_file} ended on {chain[0].not_valid_after_utc:%Y-%m-%d}: "
            "give a current certificate."
        )
    top = chain[-1]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(directory / CA_CERT, _pem(top))
    except OSError as exc:
        raise TlsError(f"cannot write {directory / CA_CERT}: {exc.strerror or exc}.") from None
    return TlsMaterial(
        cert=cert_path.resolve(),
        key=key_path.resolve(),
        ca=directory / CA_CERT,
        pin=spki_sha256(top),
        made=(f"the site's chain from MAC_TLS_CERT, pinned at {top.subject.rfc4514_string()}",),
    )


def prepare(
    directory: Path,
    names: Iterable[str],
    *,
    site_cert: str = "",
    site_key: str = "",
    cluster: str = "mac",
) -> TlsMaterial:
    """The material nginx serves: the site's when it gives one, else the master's own."""
    if site_cert or site_key:
        return prepare_site(directory, site_cert, site_key)
    return prepare_own(directory, names, cluster)


def material_paths(directory: Path, site_cert: str = "", site_key: str = "") -> TlsMaterial:
    """Where prepare() put (or found) the files, without touching them (proxy_config)."""
    if site_cert and site_key:
        cert, key = Path(site_cert).expanduser().resolve(), Path(site_key).expanduser().resolve()
    else:
        cert, key = directory / SERVER_CERT, directory / SERVER_KEY
    return TlsMaterial(cert=cert, key=key, ca=directory / CA_CERT, pin="")
