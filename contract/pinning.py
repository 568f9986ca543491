"""The agent's trust in its master: the CA it pins, checked before any secret leaves.

As `kubeadm join --discovery-token-ca-cert-hash` does: the agent fetches the master's
CA without credentials, compares the SHA-256 of the CA's public key (its DER
SubjectPublicKeyInfo) with the pin it was given (MAC_MASTER_CA_SHA256, printed by
`mac start master`), and only then talks to the master, over TLS verified against that
CA alone. The master (macweb.tls) computes the pin with the same function.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import ssl

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

# Served by the master's proxy to anyone: a CA certificate is public.
CA_PATH = "/api/v1/ca.pem"
PIN_PREFIX = "sha256:"
# A CA certificate is a few KiB; a longer answer is not one.
MAX_CA_BYTES = 64 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")


class UntrustedMaster(Exception):
    """The master's CA does not hash to the pin (or it sent no CA): nothing was sent."""

    def __init__(self, url: str, expected: str, found: str, detail: str = "") -> None:
        self.url, self.expected, self.found = url, expected, found
        if found:
            text = (
                f"the master at {url} presents a CA whose public key hashes to "
                f"{PIN_PREFIX}{found}, but MAC_MASTER_CA_SHA256 is {PIN_PREFIX}{expected}"
            )
        else:
            text = f"could not read the CA of the master at {url} to check MAC_MASTER_CA_SHA256"
        super().__init__(text + (f" ({detail})" if detail else ""))


def parse_pin(value: str) -> str:
    """The 64 lower-case hex digits of a pin, given bare or as `sha256:<hex>`."""
    text = value.strip().lower().removeprefix(PIN_PREFIX)
    if not _HEX64.fullmatch(text):
        raise ValueError(
            f"{value!r} is not a CA pin: 64 hex digits, optionally after 'sha256:' "
            "(the join line of `mac start master` prints it)."
        )
    return text


def first_certificate(pem: bytes) -> x509.Certificate:
    """The first certificate of a PEM text (ValueError when there is none)."""
    certificates = x509.load_pem_x509_certificates(pem)
    return certificates[0]


def spki_sha256(certificate: x509.Certificate) -> str:
    """SHA-256 of the certificate's DER SubjectPublicKeyInfo, as hex."""
    der = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def pinned_context(ca_pem: bytes) -> ssl.SSLContext:
    """Fully verified TLS with `ca_pem` as the only trust root.

    Partial chains are accepted so that a site's pinned intermediate (the top of the
    chain it gave the master) can stand as the root; the host name is still checked.
    """
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.check_hostname = True
    return context


def fetch_ca(
    host: str, port: int, *, timeout: float, source: tuple[str, int] | None = None
) -> bytes:
    """GET the master's CA over TLS that verifies nothing yet, and without credentials:
    no Authorization, no node key. OSError / HTTPException when it does not answer."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE  # what it sends is checked against the pin next
    conn = http.client.HTTPSConnection(
        host, port, timeout=timeout, context=probe, source_address=source
    )
    try:
        conn.request("GET", CA_PATH, headers={"Accept": "application/x-pem-file"})
        response = conn.getresponse()
        body = response.read(MAX_CA_BYTES + 1)
    finally:
        conn.close()
    if response.status != 200:
        raise http.client.HTTPException(f"GET {CA_PATH} answered HTTP {response.status}")
    return body


def trusted_context(
    url: str,
    host: str,
    port: int,
    pin: str,
    *,
    timeout: float,
    source: tuple[str, int] | None = None,
) -> ssl.SSLContext:
    """The verified context for a master whose CA hashes to `pin`; UntrustedMaster if not.

    OSError when the master cannot be reached at all (the caller reports it as such).
    """
    try:
        body = fetch_ca(host, port, timeout=timeout, source=source)
    except http.client.HTTPException as exc:
        raise UntrustedMaster(url, pin, "", str(exc)) from None
    if len(body) > MAX_CA_BYTES:
        raise UntrustedMaster(url, pin, "", f"{CA_PATH} is larger than {MAX_CA_BYTES} bytes")
    try:
        ca = first_certificate(body)
    except ValueError:
        raise UntrustedMaster(url, pin, "", f"{CA_PATH} holds no PEM certificate") from None
    found = spki_sha256(ca)
    if found != pin:
        raise UntrustedMaster(url, pin, found)
    # That one certificate alone: whatever else the answer held is trusted for nothing.
    return pinned_context(ca.public_bytes(Encoding.PEM))
