"""Only the front door answers other hosts, under Docker on the real engine (issue 22).

The master runs in the engine's namespace (198.18.250.2); this host, beside it on the
veth, is the other host. One test checks every point, since a Docker master is slow to
start: Prometheus, Alertmanager, Redis and the api-server's own port do not answer, even
routed through the master on a machine where other engines ran before (issue 31);
/prometheus/ and /alertmanager/ at the front door need a login or an API token and then
give the servers' own answers; `/-/quit` never reaches Prometheus; /metrics needs its
token; on the master itself `curl localhost:29090/api/v1/targets` still works; and the
servers' links point at the front door (MAC_PUBLIC_URL derived as the process runtime
derives it). And (issue 31) people's pages go to HTTPS while /health stays on HTTP, and
a Host the master does not answer to is a 400.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from maccli.runtimes import dockerfence
from testkit.docker_engine import NS_IP
from testkit.waiting import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
DOOR = f"http://{NS_IP}:28080"
# The links people follow: the pages are served over HTTPS (issue 31).
PUBLIC = f"https://{NS_IP}:28443"
# Each container of the master network and the port it listens on there.
OWN_PORTS = {
    "mac-api-server": 28080,
    "mac-redis": 6379,
    "mac-prometheus": 29090,
    "mac-alertmanager": 29093,
}


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError:
        return False
    return True


def _get(url: str, *, token: str = "", method: str = "GET", body: bytes | None = None):
    """(status, body) of a request from this host."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_from_another_host_only_the_front_door_answers(docker_master):
    engine = docker_master.engine
    # Ports: the front door answers; nothing else of the master does.
    assert _connects(NS_IP, 28080)
    for port in (29090, 29093, 6379, 28081):
        assert not _connects(NS_IP, port), f"{NS_IP}:{port} answers another host"
    # The containers' own ports (the api-server's first), even for a host that routes the
    # master's container network through the master (as a neighbour on its LAN could), on
    # a machine where other engines ran before (the session's engine, leftovers=True):
    # forwarding was on before dockerd started, so Docker's FORWARD policy stays ACCEPT,
    # beside another engine's docker0 rules and legacy tables that accept everything.
    assert engine.forward_policies() == {"iptables-nft": "ACCEPT", "iptables-legacy": "ACCEPT"}
    for container, port in OWN_PORTS.items():
        inspected = json.loads(engine.docker("inspect", container).stdout)[0]
        address = next(iter(inspected["NetworkSettings"]["Networks"].values()))["IPAddress"]
        route = ("ip", "route", "add", f"{address}/32", "via", NS_IP)
        subprocess.run(route, check=True, capture_output=True)
        try:
            assert not _connects(address, port), f"{container}'s own port answers another host"
        finally:
            subprocess.run(("ip", "route", "del", f"{address}/32"), check=False)
    # What keeps them out is MAC's, in DOCKER-USER, once however often the master started.
    rules = docker_master.sh("iptables-nft", "-w", "-S", "DOCKER-USER").stdout
    assert rules.count("mac-master-isolation") == 4, rules
    assert _connects(NS_IP, 28080)  # and the front door still answers

    # On the master itself, the guide's command keeps working.
    targets = docker_master.on_loopback("http://localhost:29090/api/v1/targets")
    assert targets and targets["status"] == "success", targets

    # The front door: no login, no entry; a user's token gets the servers' own answers.
    created = engine.docker(
        "exec", "mac-api-server", "python", "-m", "django", "drf_create_token", "admin"
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.split()[2]
    prometheus, status = f"{DOOR}/prometheus/api/v1/targets", f"{DOOR}/alertmanager/api/v2/status"
    assert _get(prometheus)[0] == 401
    assert _get(status)[0] == 401
    code, body = wait_for(
        lambda: (answer := _get(prometheus, token=token))[0] == 200 and answer,
        timeout=60,
        what="Prometheus through the front door",
        interval=1.0,
    )
    assert json.loads(body)["status"] == "success"
    code, body = _get(status, token=token)
    assert code == 200, body
    assert "route" in json.loads(body)["config"]["original"]

    # /-/quit never reaches Prometheus, however it is spelled.
    for path in ("/prometheus/-/quit", "/prometheus/%2D/quit", "/prometheus//-/quit"):
        assert _get(f"{DOOR}{path}", token=token, method="POST", body=b"")[0] == 403, path
    ready = docker_master.sh("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                             "http://127.0.0.1:29090/-/ready")  # fmt: skip
    assert ready.stdout == "200"

    # /metrics needs its token.
    assert _get(f"{DOOR}/metrics")[0] == 401

    # The servers' links point at the front door, at the master's derived address.
    flags = docker_master.on_loopback("http://127.0.0.1:29090/api/v1/status/flags")
    assert flags["data"]["web.external-url"] == f"{PUBLIC}/prometheus/"
    env = engine.docker("exec", "mac-api-server", "printenv", "MAC_PUBLIC_URL")
    assert env.stdout.strip() == PUBLIC

    # People's pages go to the published HTTPS port, the agents' endpoints stay on HTTP,
    # and the master answers only to its own names (issue 31).
    login = http.client.HTTPConnection(NS_IP, 28080, timeout=10)
    login.request("GET", "/accounts/login/")
    moved = login.getresponse()
    assert moved.status == 301
    assert moved.getheader("Location") == f"{PUBLIC}/accounts/login/"
    assert _get(f"{DOOR}/health")[0] == 200
    forged = http.client.HTTPConnection(NS_IP, 28080, timeout=10)
    forged.request("GET", "/health", headers={"Host": "evil.example"})
    assert forged.getresponse().status == 400


def test_rules_a_reboot_loses_come_back_with_the_boot_units_command(docker_master):
    """The rules live in the kernel: after a reboot Docker restarts the containers without
    them, and mac-master-isolation.service runs this command (maccli.systemd)."""
    engine = docker_master.engine
    inspected = json.loads(engine.docker("inspect", "mac-redis").stdout)[0]
    address = next(iter(inspected["NetworkSettings"]["Networks"].values()))["IPAddress"]
    fence = [sys.executable, "-m", "maccli.runtimes.dockerfence"]
    subprocess.run(("ip", "route", "add", f"{address}/32", "via", NS_IP), check=True)
    try:
        assert docker_master.sh(*fence, "remove").returncode == 0  # as a reboot leaves it
        assert _connects(address, 6379), "without the rules a neighbour reaches Redis"

        booted = docker_master.sh(*dockerfence.boot_command("mac_master"))

        assert booted.returncode == 0, booted.stdout + booted.stderr
        assert "MAC's rules in DOCKER-USER" in booted.stdout
        assert not _connects(address, 6379), "mac-redis's own port answers another host"
        rules = docker_master.sh("iptables-nft", "-w", "-S", "DOCKER-USER").stdout
        assert rules.count("mac-master-isolation") == 4, rules
    finally:
        docker_master.sh(*dockerfence.boot_command("mac_master"))
        subprocess.run(("ip", "route", "del", f"{address}/32"), check=False)
