"""The Compose master's HTTPS on the real engine: mac-proxy serves 28443 with the CA kept
in the mac-tls volume, and the join line pins that CA. That a restart of the master (and
`docker rm -f` of its containers) keeps the CA is checked with the restarts of
test_stale_and_master, which restarts the master anyway (one restart less in CI)."""

from __future__ import annotations

import http.client
import re

import pytest

from contract.pinning import CA_PATH, first_certificate, pinned_context, spki_sha256
from testkit.docker_engine import NS_IP

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
JOIN = re.compile(
    r"MASTER_URL=https://(?P<host>\S+):28443 && "
    r"mac env set MAC_MASTER_CA_SHA256=(?P<pin>[0-9a-f]{64})"
)


def _get(path: str, ca: bytes) -> tuple[int, bytes]:
    # The certificate names the host's addresses, which `mac` passed to the container.
    conn = http.client.HTTPSConnection(NS_IP, 28443, timeout=10, context=pinned_context(ca))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_proxy_serves_https_with_the_pinned_ca(docker_master):
    started = docker_master.mac("start", "master")  # running already: prints the join line
    assert started.returncode == 0, started.stdout + started.stderr
    joined = JOIN.search(" ".join(started.stdout.split()))
    assert joined, started.stdout
    ca = docker_master.ca()
    assert joined["pin"] == spki_sha256(first_certificate(ca))

    assert _get("/health", ca)[0] == 200
    status, served = _get(CA_PATH, ca)
    assert status == 200 and first_certificate(served) == first_certificate(ca)
