"""`mac start agent` with MASTER_URL=https://... and the master's CA pin, as the join line
of `mac start master` says: registration, doctor and deregistration over the proxy's
HTTPS (real nginx in front of the real API server), and a refusal, before any secret
leaves, of a master whose CA is not the pinned one."""

from __future__ import annotations

import os

import pytest

from macweb.tls import prepare
from testkit.ports import free_port
from testkit.processes import stop_process
from testkit.proxy import nginx_binary, prepare_tls, start_proxy
from testkit.tlsrecorder import recording_master
from tests.maccli.test_doctor_command import _roots

pytestmark = pytest.mark.skipif(nginx_binary() is None, reason="Debian's nginx is missing")


def _agent_env(mac_env, url: str, pin: str) -> None:
    mac_env.env.update(_roots(mac_env, "1"))
    mac_env.env.update(
        {
            "MASTER_URL": url,
            "MAC_MASTER_CA_SHA256": pin,
            "NODE_NAME": f"pinned-{os.getpid()}",
            "MAC_BIND": "127.0.0.1",
            "MAC_AGENT_SERVICES": "sys-exporter,nic-exporter",
            "MAC_SYS_EXPORTER_PORT": str(free_port()),
            "MAC_NIC_EXPORTER_PORT": str(free_port()),
            "MAC_START_TIMEOUT": "60",
        }
    )


@pytest.fixture
def tls_front_door(live_master, tmp_path):
    """nginx with HTTPS (and HTTP) in front of the live master; (HTTPS port, pin)."""
    env = {**os.environ, "MAC_DATA_DIR": str(tmp_path / "master")}
    pin = prepare_tls(env)
    tls_port = free_port()
    proxy = start_proxy(tmp_path, env, free_port(), live_master.port, tls_port)
    yield tls_port, pin
    stop_process(proxy)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_agent_with_the_right_pin_registers_checks_and_leaves_over_https(
    mac_env, tls_front_door
):
    from inventory.models import Node

    tls_port, pin = tls_front_door
    _agent_env(mac_env, f"https://127.0.0.1:{tls_port}", f"sha256:{pin}")
    hostname = mac_env.env["NODE_NAME"]
    try:
        started = mac_env.run("start", "agent")
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.strip().splitlines()[-1] == "Registered with master 127.0.0.1."
        assert Node.objects.filter(hostname=hostname).exists()
        assert "MAC_NODE_KEY=" in mac_env.node_file.read_text()

        doctor = mac_env.run("doctor", "--json")
        statuses = {c["id"]: (c["status"], c["detail"]) for c in _checks(doctor.stdout)}
        assert statuses["master_pinned"] == (
            "pass",
            f"https://127.0.0.1:{tls_port}, trusted only with the CA sha256:{pin[:16]}...",
        )
        assert statuses["master_reachable"][0] == "pass"
        assert statuses["node_registered"][0] == "pass"
    finally:
        stopped = mac_env.run("stop", "agent")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"Deregistered {hostname} from master 127.0.0.1." in stopped.stdout
    assert not Node.objects.filter(hostname=hostname).exists()


def _checks(text: str) -> list[dict]:
    import json

    return json.loads(text)["checks"]


def test_an_agent_with_a_wrong_pin_sends_no_secret_and_starts_nothing(mac_env, tmp_path):
    impostor = prepare(tmp_path / "impostor", ["127.0.0.1"])
    ours = prepare(tmp_path / "ours", []).pin
    with recording_master(impostor.cert, impostor.key, impostor.ca) as recorder:
        _agent_env(mac_env, f"https://127.0.0.1:{recorder.port}", ours)
        mac_env.env["MAC_JOIN_TOKEN"] = "join-token-kept-home"
        # A node that registered before keeps its key in the per-node file.
        mac_env.node_file.parent.mkdir(parents=True, exist_ok=True)
        mac_env.node_file.write_text("MAC_NODE_KEY=node-key-kept-home\n")
        mac_env.node_file.chmod(0o600)

        started = mac_env.run("start", "agent")
        stopped = mac_env.run("stop", "agent")
        doctor = mac_env.run("doctor", "--json")

    assert started.returncode == 1
    error = " ".join(started.stderr.split())
    assert f"presents a CA whose public key hashes to sha256:{impostor.pin}" in error
    assert f"but MAC_MASTER_CA_SHA256 is sha256:{ours}" in error
    assert "Nothing was sent to it: neither the join token nor the node key." in error
    assert "sudo mac env set --node MAC_MASTER_CA_SHA256=<pin>" in error
    assert "Traceback" not in started.stderr
    assert not list((mac_env.state_dir / "agent").glob("*.pid"))  # nothing was started
    # `mac stop agent` stops what runs and keeps the node's key: it never deregistered.
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr
    assert "MAC_NODE_KEY=node-key-kept-home" in mac_env.node_file.read_text()
    checks = {c["id"]: c for c in _checks(doctor.stdout)}
    assert checks["master_reachable"]["status"] == "fail"
    assert impostor.pin in checks["master_reachable"]["detail"]

    everything = recorder.everything()
    assert b"join-token-kept-home" not in everything
    assert b"node-key-kept-home" not in everything
    assert all(request.startswith(b"GET /api/v1/ca.pem ") for request in recorder.received)
    assert len(recorder.received) >= 3  # start, stop and doctor each asked for the CA
