"""Only the front door answers other hosts (issue 22), process runtime.

A whole master (`mac start master`, every server real, free ports) listens on every
address; a network namespace on 198.18.22.0/24 stands in for another host beside it.
From there Prometheus, Alertmanager, the API server's own port and Redis refuse; the
front door serves /prometheus/ and /alertmanager/ only to a session or an API token,
with Alertmanager's writes and status to those with the permission; `/-/quit` never
reaches Prometheus; /metrics needs the token the master made at its first start.

And people's passwords never cross plain HTTP (issue 31): from the other host, the
login, admin and dashboard pages answer HTTP with a redirect to HTTPS while the machine
endpoints keep plain HTTP; the master's own loopback keeps the pages on HTTP; over
HTTPS the session and CSRF cookies are Secure; a Host the master does not answer to is
a 400.

On the master itself, the same front door holds against a plain reader who tries
every write and maintenance endpoint in every spelling (testkit.metrics_writes, the
table the scale-out mode's test iterates too), and serves what Grafana asks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from testkit.alertstack import ADMIN_PASSWORD, AlertStack
from testkit.browser import CHROMIUM, chromium_page, dead_links
from testkit.metrics_writes import PROBE, datasource_reads, send, spelled_writes
from testkit.otherhost import OtherHost, other_host, why_unavailable
from testkit.ports import free_port
from testkit.waiting import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
        reason="Debian's prometheus and prometheus-alertmanager are needed",
    ),
]
# The tests seen from another host need a network namespace (root).
needs_another_host = pytest.mark.skipif(bool(why_unavailable()), reason=why_unavailable() or "-")
WRITES = spelled_writes()


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


@pytest.mark.netns
@needs_another_host
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


@pytest.mark.netns
@needs_another_host
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


@pytest.mark.netns
@needs_another_host
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


@pytest.mark.netns
@needs_another_host
def test_quit_never_reaches_prometheus(master, beside: OtherHost, tokens):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    for path in ("/prometheus/-/quit", "/prometheus/%2D/quit", "/prometheus//-/quit",
                 "/prometheus/api/../-/quit", "/alertmanager/-/reload"):  # fmt: skip
        # GET too: a gate that took every GET for a read would let these through.
        for method in ("GET", "POST"):
            done = beside.curl("-X", method, "--path-as-is", *_bearer(tokens["admin"]),
                               f"{door}{path}")  # fmt: skip
            assert done.stdout.rsplit("\n", 1)[-1] == "403", (method, path, done.stdout)
    # Even on the master's loopback the lifecycle endpoints are off.
    request = urllib.request.Request(f"{master.prom_url}/-/quit", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 403
    with urllib.request.urlopen(f"{master.prom_url}/-/ready", timeout=5) as response:
        assert response.status == 200


@pytest.mark.netns
@needs_another_host
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
    assert "/prometheus/targets" in out and "/alerts/" in out and "/alertmanager/)" in out
    assert f":{master.prom_port}/targets" not in out.split("also")[0]


def _headers_and_code(done: subprocess.CompletedProcess) -> tuple[str, str]:
    """The headers curl wrote (-D -) and the status it appended."""
    headers, code = done.stdout.rsplit("\n", 1)
    return headers, code


def _cookie(headers: str, name: str) -> str:
    """The Set-Cookie line of `name` in these headers."""
    found = re.search(rf"^set-cookie: {name}=.*$", headers, re.IGNORECASE | re.MULTILINE)
    assert found, headers
    return found.group(0)


def test_people_pages_go_to_https_from_another_host_while_machines_keep_http(
    master, beside: OtherHost, tokens
):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    https = f"https://{beside.master}:{master.env['MAC_TLS_PORT']}"
    for path in ("/", "/accounts/login/?next=/", "/admin/", "/admin/login/", "/nodes/1/"):
        headers, code = _headers_and_code(beside.curl("-o", "/dev/null", "-D", "-", door + path))
        assert code == "301", (path, headers)
        assert f"location: {https}{path}\n" in headers.lower(), (path, headers)

    # The guide's machine endpoints: plain HTTP, answered as before.
    assert beside.status(f"{door}/health") == "200"
    registered = beside.curl(
        "-H", "Content-Type: application/json",
        "--data", json.dumps({"hostname": "doors-agent-01", "exporters": {"sys-exporter": 29101}}),
        f"{door}/api/v1/register",
    )  # fmt: skip
    assert registered.stdout.rsplit("\n", 1)[-1] in ("200", "201"), registered.stdout
    nodes = f"{door}/api/v1/nodes/"
    assert beside.status(nodes, "-H", f"Authorization: Token {tokens['reader']}") == "200"
    assert beside.status(f"{door}/metrics", *_bearer(master.metrics_token)) == "200"


def test_the_masters_own_loopback_keeps_the_login_page_on_http(master):
    with urllib.request.urlopen(f"{master.url}/accounts/login/", timeout=10) as response:
        assert response.status == 200
        csrf = response.headers["Set-Cookie"]
    assert csrf.startswith("csrftoken=") and "secure" not in csrf.lower()


def test_cookies_are_secure_over_https(master, beside: OtherHost, tmp_path):
    from testkit.alertstack import ADMIN_PASSWORD

    login = f"https://{beside.master}:{master.env['MAC_TLS_PORT']}/accounts/login/"
    jar = str(tmp_path / "cookies")
    page = beside.curl("-k", "-c", jar, "-D", "-", login)
    page_headers, code = _headers_and_code(page)
    assert code == "200", page.stdout
    assert "; secure" in _cookie(page_headers, "csrftoken").lower()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.stdout).group(1)

    form = f"username=admin&password={ADMIN_PASSWORD}&csrfmiddlewaretoken={token}"
    logged = beside.curl(
        "-k", "-b", jar, "-c", jar, "-o", "/dev/null", "-D", "-",
        "-H", f"Referer: {login}", "--data", form, login,
    )  # fmt: skip
    headers, code = _headers_and_code(logged)
    assert code == "302", logged.stdout
    assert "; secure" in _cookie(headers, "sessionid").lower()
    assert "; httponly" in _cookie(headers, "sessionid").lower()


def test_a_host_the_master_does_not_answer_to_is_a_400(master, beside: OtherHost):
    door = f"http://{beside.master}:{master.env['MAC_MASTER_PORT']}"
    refused = beside.curl("-H", "Host: evil.example", f"{door}/health")
    body, code = refused.stdout.rsplit("\n", 1)
    assert code == "400", refused.stdout
    assert "does not answer to the name 'evil.example'" in json.loads(body)["detail"]
    # Behind the gate too: a refusal that says why, never nginx's 500.
    gated = beside.curl("-H", "Host: evil.example", f"{door}/prometheus/api/v1/query?query=up")
    body, code = gated.stdout.rsplit("\n", 1)
    assert code == "403", gated.stdout
    assert "does not answer to the name 'evil.example'" in body


def _series_count(master) -> int:
    query = urllib.parse.urlencode({"query": 'count({__name__=~".+"})'})
    answer = master.get_json(f"{master.prom_url}/api/v1/query?{query}")
    return int(float(answer["data"]["result"][0]["value"][1]))


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(("name", "attempt", "uri"), WRITES, ids=[w[0] for w in WRITES])
def test_a_reader_writes_nothing_to_prometheus_in_any_spelling(
    master, tokens, name, attempt, uri, method
):
    before = _series_count(master)
    status, body = send(master.url, tokens["reader"], method, uri, attempt.body,
                        attempt.content_type)  # fmt: skip
    assert status == 403, (status, body[:300])  # the gate's refusal, with its reason
    assert body.strip()
    assert _series_count(master) >= before


def test_nothing_a_reader_tried_reached_prometheus(master):
    query = urllib.parse.urlencode({"match[]": PROBE})
    assert master.get_json(f"{master.prom_url}/api/v1/series?{query}")["data"] == []
    with urllib.request.urlopen(f"{master.prom_url}/-/ready", timeout=5) as response:
        assert response.status == 200  # still serving: /-/quit never reached it


@pytest.mark.parametrize("read", datasource_reads(), ids=lambda read: read.name)
def test_a_reader_gets_what_grafana_asks(master, tokens, read):
    uri = f"/prometheus{read.target}"
    status, body = send(master.url, tokens["reader"], read.method, uri, read.body)
    assert status == 200, body[:300]
    assert json.loads(body)["status"] == "success"


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_every_link_people_follow_lands_on_a_useful_page(master):
    """In Chromium: what `mac start master` printed, the navigation bar, and the pages
    of Prometheus and Alertmanager people open (Debian ships Prometheus's classic UI
    only, and Alertmanager without one)."""
    # The links are HTTPS (issue 31), signed by the master's own CA, which people install.
    ca = (master.root / "data" / "tls" / "ca.pem").read_bytes()
    with chromium_page(trusted_ca=ca) as page:
        dead = dead_links(page, master.started.stdout, "admin", ADMIN_PASSWORD, master.prom_port)
        base = page.url.split("/", 3)[:3]
        page.goto("/".join(base) + "/prometheus/graph")
        assert page.url.endswith("/prometheus/classic/graph")
        page.goto("/".join(base) + "/alertmanager/")
        assert page.url.endswith("/alerts/")
    assert dead == {}, "\n".join(dead.values())
