"""The agent's client with a CA pin, against a TLS server that records what it was sent:
with the wrong pin nothing but the credential-free CA request reaches it; with the right
one the requests go, verified against that CA alone."""

from __future__ import annotations

import pytest

from contract.master_api import MasterClient
from contract.pinning import CA_PATH, UntrustedMaster, parse_pin
from macweb.tls import prepare
from testkit.tlsrecorder import recording_master

TOKEN = "join-token-that-must-stay-home"
NODE_KEY = "node-key-that-must-stay-home"


@pytest.fixture
def impostor(tmp_path):
    """A master with a CA of its own (not the one the agent pinned)."""
    material = prepare(tmp_path / "impostor", ["127.0.0.1"])
    with recording_master(material.cert, material.key, material.ca) as recorder:
        yield recorder, material.pin


def _client(port: int, pin: str) -> MasterClient:
    return MasterClient(
        f"https://127.0.0.1:{port}", timeout=5, join_token=TOKEN, node_key=NODE_KEY, ca_pin=pin
    )


def test_a_wrong_pin_stops_before_any_credential_is_sent(impostor, tmp_path):
    recorder, their_pin = impostor
    ours = prepare(tmp_path / "ours", []).pin
    client = _client(recorder.port, ours)

    with pytest.raises(UntrustedMaster) as raised:
        client.register({"hostname": "n1", "ip": "127.0.0.1"})

    message = str(raised.value)
    assert f"hashes to sha256:{their_pin}" in message
    assert f"MAC_MASTER_CA_SHA256 is sha256:{ours}" in message
    assert (raised.value.expected, raised.value.found) == (ours, their_pin)
    # Again, and through every call an agent makes: still nothing but the CA request.
    for call in (client.health, client.self_info, lambda: client.deregister("n1")):
        with pytest.raises(UntrustedMaster):
            call()
    everything = recorder.everything()
    assert TOKEN.encode() not in everything and NODE_KEY.encode() not in everything
    assert all(
        request.startswith(f"GET {CA_PATH} HTTP/1.1\r\n".encode()) for request in recorder.received
    ), recorder.received
    assert b"authorization" not in everything.lower()
    assert b"x-mac-node-key" not in everything.lower()
    assert b"POST" not in everything


def test_the_right_pin_sends_the_requests_over_verified_tls(impostor):
    recorder, their_pin = impostor
    client = _client(recorder.port, their_pin)

    reply = client.register({"hostname": "n1", "ip": "127.0.0.1"})

    assert reply.status == 200 and reply.body["node_key"] == "from-the-impostor"
    assert recorder.received[0].startswith(f"GET {CA_PATH} ".encode())
    register = recorder.received[1]
    assert register.startswith(b"POST /api/v1/register HTTP/1.1\r\n")
    assert f"Authorization: Bearer {TOKEN}".encode() in register
    assert f"X-MAC-Node-Key: {NODE_KEY}".encode() in register
    # The pin is checked once per client: the next request goes straight out.
    assert client.health().status == 200
    assert len(recorder.received) == 3


def test_a_ca_answer_that_is_no_certificate_is_refused(tmp_path):
    material = prepare(tmp_path / "m", ["127.0.0.1"])
    bogus = tmp_path / "bogus.pem"
    bogus.write_bytes(b"<html>hello</html>")
    with (
        recording_master(material.cert, material.key, bogus) as recorder,
        pytest.raises(UntrustedMaster, match=r"could not read the CA .* holds no PEM"),
    ):
        _client(recorder.port, material.pin).health()
    assert TOKEN.encode() not in recorder.everything()


def test_a_name_missing_from_the_certificate_says_where_to_add_it(tmp_path):
    material = prepare(tmp_path / "m", ["10.20.0.5"])
    # The certificate names 10.20.0.5 and loopback's 127.0.0.1, not 127.0.0.2.
    with recording_master(material.cert, material.key, material.ca, "127.0.0.2") as recorder:
        client = MasterClient(
            f"https://127.0.0.2:{recorder.port}", timeout=5, node_key=NODE_KEY, ca_pin=material.pin
        )
        reply = client.health()
    assert reply.status == 0
    assert "not valid for '127.0.0.2'" in reply.error and "MAC_TLS_NAMES" in reply.error
    assert NODE_KEY.encode() not in b"".join(recorder.received)


def test_a_pin_needs_an_https_url_and_64_hex_digits():
    with pytest.raises(ValueError, match="needs an https:// master URL"):
        MasterClient("http://10.0.0.1:28080", ca_pin="a" * 64)
    assert parse_pin("sha256:" + "AB" * 32) == "ab" * 32
    with pytest.raises(ValueError, match="is not a CA pin: 64 hex digits"):
        parse_pin("sha256:abc")
