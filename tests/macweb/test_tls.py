"""macweb.tls and `manage.py prepare_tls`: the master's CA is made once and kept, its
server certificate is made again only when needed, and a site's own chain is checked
before nginx ever sees it."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from contract.pinning import first_certificate, spki_sha256
from macweb.tls import CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY, TlsError, prepare

REPO = Path(__file__).resolve().parents[2]


def _openssl_pin(pem: Path) -> str:
    """The pin as kubeadm's documentation computes it, with Debian's openssl."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    pubkey = subprocess.run(
        ["openssl", "x509", "-in", str(pem), "-pubkey", "-noout"],
        capture_output=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"],
        input=pubkey, capture_output=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    digest = subprocess.run(
        ["openssl", "dgst", "-sha256", "-r"], input=der, capture_output=True, check=True
    ).stdout
    return digest.split()[0].decode()


def _sans(path: Path) -> list[str]:
    cert = first_certificate(path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(name.value) for name in names]


def test_it_makes_a_ca_and_a_server_certificate_for_the_names(tmp_path):
    material = prepare(tmp_path / "tls", ["10.20.0.5", "master-1.example"])

    assert material.pin == _openssl_pin(tmp_path / "tls" / CA_CERT)
    assert material.ca == tmp_path / "tls" / CA_CERT
    assert _sans(material.cert) == [
        "10.20.0.5", "master-1.example", "localhost", "127.0.0.1", "::1"
    ]  # fmt: skip
    chain = x509.load_pem_x509_certificates(material.cert.read_bytes())
    ca = first_certificate(material.ca.read_bytes())
    chain[0].verify_directly_issued_by(ca)
    assert chain[1] == ca  # nginx sends the CA after the server certificate
    for secret in (CA_KEY, SERVER_KEY):
        assert (tmp_path / "tls" / secret).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "tls").stat().st_mode & 0o777 == 0o700
    assert len(material.made) == 2


def test_a_second_start_keeps_everything_and_a_new_name_keeps_the_ca(tmp_path):
    directory = tmp_path / "tls"
    first = prepare(directory, ["10.20.0.5"])
    files = {name: (directory / name).read_bytes() for name in (CA_CERT, CA_KEY, SERVER_CERT)}

    again = prepare(directory, ["10.20.0.5"])
    assert again.pin == first.pin and again.made == ()
    assert {name: (directory / name).read_bytes() for name in files} == files

    moved = prepare(directory, ["10.20.0.9"])
    assert moved.pin == first.pin
    assert (directory / CA_CERT).read_bytes() == files[CA_CERT]
    assert (directory / CA_KEY).read_bytes() == files[CA_KEY]
    assert (directory / SERVER_CERT).read_bytes() != files[SERVER_CERT]
    assert "10.20.0.9" in _sans(directory / SERVER_CERT)
    assert moved.made == (
        "a server certificate for 10.20.0.9, localhost, 127.0.0.1, ::1 (new names: 10.20.0.9)",
    )


def test_a_server_certificate_of_another_ca_is_made_again(tmp_path):
    directory = tmp_path / "tls"
    prepare(directory, ["10.20.0.5"])
    stranger = prepare(tmp_path / "other", ["10.20.0.5"])
    shutil.copy(stranger.cert, directory / SERVER_CERT)
    shutil.copy(stranger.key, directory / SERVER_KEY)

    fixed = prepare(directory, ["10.20.0.5"])

    assert fixed.made == (
        "a server certificate for 10.20.0.5, localhost, 127.0.0.1, ::1 (not issued by this CA)",
    )
    ca = first_certificate((directory / CA_CERT).read_bytes())
    first_certificate((directory / SERVER_CERT).read_bytes()).verify_directly_issued_by(ca)


def test_a_broken_ca_stops_the_start_and_is_never_replaced(tmp_path):
    directory = tmp_path / "tls"
    prepare(directory, [])
    (directory / CA_KEY).unlink()
    kept = (directory / CA_CERT).read_bytes()

    with pytest.raises(TlsError, match=r"ca-key\.pem is missing .* move .* away"):
        prepare(directory, [])
    assert (directory / CA_CERT).read_bytes() == kept


# --- the site's own chain -----------------------------------------------------------------


def _issue(subject: str, issuer_key, issuer_name, *, ca: bool, key=None) -> tuple:
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key or key, hashes.SHA256())
    )
    return cert, key


def _pem(*certs) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture
def site_chain(tmp_path):
    """A site's PKI: root > intermediate > server; the chain file holds server, intermediate."""
    root, root_key = _issue("Site Root", None, None, ca=True)
    inter, inter_key = _issue("Site Issuing CA", root_key, root.subject, ca=True)
    server, server_key = _issue("master.site.example", inter_key, inter.subject, ca=False)
    (tmp_path / "chain.pem").write_bytes(_pem(server, inter))
    (tmp_path / "server.key").write_bytes(_key_pem(server_key))
    return tmp_path / "chain.pem", tmp_path / "server.key", inter


def test_a_site_chain_is_served_as_given_and_its_top_is_pinned(tmp_path, site_chain):
    chain, key, top = site_chain

    material = prepare(tmp_path / "tls", ["ignored"], site_cert=str(chain), site_key=str(key))

    assert material.cert == chain and material.key == key
    assert first_certificate(material.ca.read_bytes()) == top
    assert material.pin == spki_sha256(top) == _openssl_pin(material.ca)
    assert not (tmp_path / "tls" / CA_KEY).exists()  # no CA of its own is made


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path, site_chain):
    chain, _key, _top = site_chain
    other = tmp_path / "other.key"
    other.write_bytes(_key_pem(ec.generate_private_key(ec.SECP256R1())))

    with pytest.raises(TlsError, match=r"MAC_TLS_KEY=.*other\.key is not the key of the first"):
        prepare(tmp_path / "tls", [], site_cert=str(chain), site_key=str(other))


def test_a_missing_file_or_half_a_pair_is_refused(tmp_path, site_chain):
    chain, key, _top = site_chain
    with pytest.raises(TlsError, match=r"MAC_TLS_CERT=/nonexistent.pem: cannot read it"):
        prepare(tmp_path / "tls", [], site_cert="/nonexistent.pem", site_key=str(key))
    with pytest.raises(TlsError, match="MAC_TLS_CERT is set but MAC_TLS_KEY is not"):
        prepare(tmp_path / "tls", [], site_cert=str(chain))
    with pytest.raises(TlsError, match=r"MAC_TLS_CERT=.*server\.key holds no PEM certificate"):
        prepare(tmp_path / "tls", [], site_cert=str(key), site_key=str(key))


def _prepare_tls(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "django", "prepare_tls", "--name", "10.20.0.5,master-1"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_command_prints_the_pin_last_and_names_a_bad_key_without_a_traceback(
    tmp_path, site_chain
):
    env = {**os.environ, "MAC_DATA_DIR": str(tmp_path / "data"), "MAC_TLS_NAMES": "10.99.0.1"}
    done = _prepare_tls(env)
    assert done.returncode == 0, done.stderr
    pin = _openssl_pin(tmp_path / "data" / "tls" / CA_CERT)
    assert done.stdout.splitlines()[-1] == f"MAC_MASTER_CA_SHA256={pin}"
    assert _sans(tmp_path / "data" / "tls" / SERVER_CERT)[:3] == [
        "10.20.0.5", "master-1", "10.99.0.1"
    ]  # fmt: skip

    chain, _key, _top = site_chain
    env.update(MAC_TLS_CERT=str(chain), MAC_TLS_KEY=str(chain))
    bad = _prepare_tls(env)
    assert bad.returncode == 1
    assert "MAC_TLS_KEY=" in bad.stderr and "holds no PEM private key" in bad.stderr
    assert "Traceback" not in bad.stderr
