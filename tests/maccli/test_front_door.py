"""Only the front door answers other hosts (issue 22), process runtime.

A whole master (`mac start master`, every server real, free ports) listens on every
address; a network namespace on 198.18.22.0/24 stands in for another host beside it.
From there Prometheus, Alertmanager, the API server's own port and Redis refuse; the
front door serves /prometheus/ and /alertmanager/ only to a session or an API token,
with Alertmanager's writes and status to those with the permission; `/-/quit` never
reaches Prometheus; /metrics needs the token the master made at its first start.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from testkit.alertstack import AlertStack
from testkit.otherhost import OtherHost, other_host, why_unavailable
from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.netns,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
    pytest.mark.skipif(bool(why_unavailable()), reason=why_unavailable() or "-"),
]


def _django(stack: AlertStack, code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code],
        env={**stack.env, "DJANGO_SETTINGS_MODULE": "macweb.settings"},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture(scope="module")
def master(tmp_path_factory):
    stack = AlertStack(
        tmp_path_factory.mktemp("front-door"),
        settings={
            # Every address, as on a real master: what is safe must be so by itself.
            "MAC_MASTER_BIND": "0.0.0.0",
            "MAC_API_INTERNAL_PORT": str(free_port()),
            "MAC_PUBLIC_URL": "",
        },
    )
    stack.started = stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def tokens(master) -> dict[str, str]:
    """API tokens of the admin (superuser) and of a plain user (reads only)."""
    code = (
        "from django.contrib.auth.models import User\n"
        "from rest_framework.authtoken.models import Token\n"
        "plain, _ = User.objects.get_or_create(username='reader')\n"
        "admin = User.objects.get(username='admin')\n"
        "print(Token.objects.get_or_create(user=admin)[0].key, "
        "Token.objects.get_or_create(user=plain)[0].key)"
    )
    admin, reader = _django(master, code).splitlines()[-1].split()
    return {"admin": admin, "reader": reader}


@pytest.fixture(scope="module")
def beside():
    with other_host() as host:
        yield host


def _bearer(token: str) -> tuple[str, str]:
    return ("-H", f"Authorization: Bearer {token}")


def test_from_another_host_only_the_front_door_answers(master, beside: OtherHost):
    front = int(master.env["MAC_MASTER_PORT"])
    assert beside.connects(front)
    for port in (
        master.prom_port,
        master.am_port,
        int(master.env["MAC_API_INTERNAL_PORT"]),
        6379,
    ):
        assert not beside.connects(port), f"port {port} answers another host"
    # On the master itself, the guide's command keeps working.
    with urllib.request.urlopen(f"{master.prom_url}/api/v1/targets", timeout=5) as response:
        assert json.load(response)["status"] == "success"


def test_prometheus_and_alertmanager_need_a_login_at_the_front_door(
    master, beside: OtherHost, tokens
):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    targets, status = f"{door}/prometheus/api/v1/targets", f"{door}/alertmanager/api/v2/status"
    assert beside.status(targets) == "401"
    assert beside.status(status) == "401"
    assert beside.status(targets, "-H", "Authorization: Bearer not-a-token") == "401"
    # A browser goes to the login page and comes back.
    page = beside.curl("-H", "Accept: text/html", "-o", "/dev/null", "-D", "-", targets)
    assert page.stdout.rsplit("\n", 1)[-1] == "302"
    assert "/accounts/login/?next=/prometheus/api/v1/targets" in page.stdout

    # A plain user's token reads Prometheus: its own answer.
    read = beside.curl(*_bearer(tokens["reader"]), targets)
    body, code = read.stdout.rsplit("\n", 1)
    assert code == "200", read.stdout
    assert json.loads(body)["status"] == "success"
    assert "activeTargets" in json.loads(body)["data"]
    # ...and Grafana's POSTed queries, but not Alertmanager's configuration (secrets).
    query = beside.curl(
        *_bearer(tokens["reader"]), "--data", "query=up", f"{door}/prometheus/api/v1/query"
    )
    assert query.stdout.rsplit("\n", 1)[-1] == "200", query.stdout
    refused = beside.curl(*_bearer(tokens["reader"]), status)
    assert refused.stdout.rsplit("\n", 1)[-1] == "403"
    assert "alerting.manage_alertmanager" in refused.stdout

    # The admin's session and token get Alertmanager's real status.
    session = master.admin()
    cookie = next(c.value for c in session.jar if c.name == "sessionid")
    by_session = beside.curl("-H", f"Cookie: sessionid={cookie}", status)
    body, code = by_session.stdout.rsplit("\n", 1)
    assert code == "200", by_session.stdout
    assert "route" in json.loads(body)["config"]["original"]
    by_token = beside.curl(*_bearer(tokens["admin"]), targets)
    assert by_token.stdout.rsplit("\n", 1)[-1] == "200"


def test_only_those_with_the_permission_silence(master, beside: OtherHost, tokens):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    silence = json.dumps(
        {
            "matchers": [{"name": "alertname", "value": "FrontDoorTest", "isRegex": False}],
            "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "2099-01-01T00:00:00Z",
            "createdBy": "front-door-test",
            "comment": "issue 22",
        }
    )
    args = ("-H", "Content-Type: application/json", "--data", silence)
    url = f"{door}/alertmanager/api/v2/silences"
    assert beside.status(url, *_bearer(tokens["reader"]), *args) == "403"
    made = beside.curl(*_bearer(tokens["admin"]), *args, url)
    body, code = made.stdout.rsplit("\n", 1)
    assert code == "200", made.stdout
    silence_id = json.loads(body)["silenceID"]
    with urllib.request.urlopen(f"{master.am_url}/api/v2/silence/{silence_id}", timeout=5) as r:
        assert json.load(r)["createdBy"] == "front-door-test"


def test_quit_never_reaches_prometheus(master, beside: OtherHost, tokens):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    for path in ("/prometheus/-/quit", "/prometheus/%2D/quit", "/prometheus//-/quit",
                 "/prometheus/api/../-/quit", "/alertmanager/-/reload"):  # fmt: skip
        done = beside.curl("-X", "POST", *_bearer(tokens["admin"]), f"{door}{path}")
        assert done.stdout.rsplit("\n", 1)[-1] == "403", (path, done.stdout)
    # Even on the master's loopback the lifecycle endpoints are off.
    request = urllib.request.Request(f"{master.prom_url}/-/quit", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    with urllib.request.urlopen(f"{master.prom_url}/-/ready", timeout=5) as response:
        assert response.status == 200


def test_metrics_needs_the_token_the_master_made(master, beside: OtherHost):
    metrics = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}/metrics"
    assert beside.status(metrics) == "401"
    assert beside.status(metrics, *_bearer(master.metrics_token)) == "200"
    # Its own Prometheus sends it: the master's job is up.
    wanted = {"job": "mac-master", "health": "up"}

    def master_job_up() -> bool:
        with urllib.request.urlopen(f"{master.prom_url}/api/v1/targets", timeout=5) as r:
            targets = json.load(r)["data"]["activeTargets"]
        return any(
            t["labels"].get("job") == wanted["job"] and t["health"] == wanted["health"]
            for t in targets
        )

    wait_for(master_job_up, timeout=60, what="Prometheus scraping the master with its token")


def test_start_prints_the_front_door_urls(master):
    out = master.started.stdout
    assert "/prometheus/targets" in out and "/alertmanager/" in out
    assert f":{master.prom_port}/targets" not in out.split("also")[0]
