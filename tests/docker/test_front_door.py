"""Only the front door answers other hosts, under Docker on the real engine (issue 22).

The master runs in the engine's namespace (198.18.250.2); this host, beside it on the
veth, is the other host. One test checks every point, since a Docker master is slow to
start: Prometheus, Alertmanager, Redis and the api-server's own port do not answer;
/prometheus/ and /alertmanager/ at the front door need a login or an API token and then
give the servers' own answers; `/-/quit` never reaches Prometheus; /metrics needs its
token; on the master itself `curl localhost:29090/api/v1/targets` still works; and the
servers' links point at the front door (MAC_PUBLIC_URL derived as the process runtime
derives it).
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from testkit.docker_engine import NS_IP
from testkit.waiting import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]
DOOR = f"http://{NS_IP}:28080"


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
    # The api-server's own port, even for a host that routes the master's container
    # network through the master (as a neighbour on its LAN could).
    api = json.loads(engine.docker("inspect", "mac-api-server").stdout)[0]
    api_ip = next(iter(api["NetworkSettings"]["Networks"].values()))["IPAddress"]
    route = ("ip", "route", "add", f"{api_ip}/32", "via", NS_IP)
    subprocess.run(route, check=True, capture_output=True)
    try:
        assert not _connects(api_ip, 28080), "the api-server's own port answers another host"
    finally:
        subprocess.run(("ip", "route", "del", f"{api_ip}/32"), check=False, capture_output=True)

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
    assert flags["data"]["web.external-url"] == f"{DOOR}/prometheus/"
    env = engine.docker("exec", "mac-api-server", "printenv", "MAC_PUBLIC_URL")
    assert env.stdout.strip() == DOOR
