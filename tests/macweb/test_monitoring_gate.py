"""The gate nginx asks before /prometheus/ and /alertmanager/ (macweb.monitoring_gate):
an allow-list of reads, Alertmanager's writes for those with the permission, nothing
else in any spelling. The real nginx in front of it, with a real Prometheus and a real
VictoriaMetrics behind, is tests/maccli/test_front_door.py's and test_scaleout.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from macweb.monitoring_gate import ENDPOINTS, Need, decide, markdown_table, normalise
from testkit.metrics_writes import datasource_reads, gate_uri, spelled_writes

GATE = "/auth/monitoring"
WRITES = spelled_writes()


def ask(client, method: str, uri: str, **headers):
    return client.get(
        GATE,
        headers={"X-Original-Method": method, "X-Original-URI": uri, **headers},
    )


@pytest.mark.parametrize(
    ("uri", "method", "need"),
    [
        ("/prometheus/api/v1/targets", "GET", Need.READ),
        ("/prometheus/api/v1/query_range", "POST", Need.READ),  # Grafana
        ("/prometheus/api/v1/label/instance/values", "GET", Need.READ),
        ("/prometheus/classic/graph", "HEAD", Need.READ),
        ("/prometheus/classic/static/js/graph/index.js", "GET", Need.READ),
        ("/prometheus/", "GET", Need.READ),
        ("/prometheus/-/ready", "GET", Need.READ),
        ("/prometheus/api/v1/targets", "POST", Need.NEVER),
        ("/prometheus/api/v1/status/config", "GET", Need.NEVER),  # a site's credentials
        ("/prometheus/classic/config", "GET", Need.NEVER),
        ("/prometheus/federate", "GET", Need.NEVER),
        ("/prometheus/metrics", "GET", Need.NEVER),
        ("/prometheus/api/v1/read", "POST", Need.NEVER),
        ("/prometheus/api/v1/query", "DELETE", Need.NEVER),
        ("/prometheus/api/v1/series", "DELETE", Need.NEVER),
        ("/prometheus/api/v1/query", "OPTIONS", Need.NEVER),
        ("/prometheus/classic/static/../../-/quit", "GET", Need.NEVER),
        ("/alertmanager/api/v2/alerts", "GET", Need.READ),
        ("/alertmanager/api/v2/alerts/groups", "GET", Need.READ),
        ("/alertmanager/api/v2/silences", "GET", Need.READ),
        ("/alertmanager/api/v2/silence/8f1c2a3b-0000-4000-8000-000000000000", "GET", Need.READ),
        ("/alertmanager/api/v2/status", "GET", Need.MANAGE),  # the channels' secrets
        ("/alertmanager/api/v2//status", "GET", Need.MANAGE),
        ("/alertmanager/api/v2/x/../status", "GET", Need.MANAGE),
        ("/alertmanager/api/v2/silences", "POST", Need.MANAGE),
        ("/alertmanager/api/v2/silence/8f1c", "DELETE", Need.MANAGE),
        ("/alertmanager/api/v2/alerts", "POST", Need.MANAGE),
        ("/alertmanager/api/v2/status/", "GET", Need.NEVER),
        ("/alertmanager/api/v1/status", "GET", Need.NEVER),  # API v1: not served
        ("/alertmanager/api/v2/receivers", "POST", Need.NEVER),
        ("/alertmanager/metrics", "GET", Need.NEVER),
        ("/alertmanager/debug/pprof/heap", "GET", Need.NEVER),
        ("/alertmanager/-/reload", "POST", Need.NEVER),
        ("/alertmanager/-/reload", "GET", Need.NEVER),
    ],
)
def test_it_decides_each_request(uri, method, need):
    assert decide(uri, method)[0] is need


@pytest.mark.parametrize(("name", "attempt", "uri"), WRITES, ids=[w[0] for w in WRITES])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_no_write_of_the_store_passes_in_any_spelling_or_method(name, attempt, uri, method):
    need, why = decide(gate_uri(uri), method)
    assert need is Need.NEVER and why
    # Undecoded, as another front end might hand it over, it is refused too.
    assert decide(uri.partition("?")[0], method)[0] is Need.NEVER


@pytest.mark.parametrize("read", datasource_reads(), ids=lambda read: read.name)
def test_what_grafana_asks_is_a_read(read):
    assert decide(gate_uri(f"/prometheus{read.target}"), read.method) == (Need.READ, "")


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/prometheus/api/v1/query", "/prometheus/api/v1/query"),
        ("/prometheus//api///v1/query", "/prometheus/api/v1/query"),
        ("/prometheus/./api/v1/./query", "/prometheus/api/v1/query"),
        ("/prometheus/api/x/../v1/query", "/prometheus/api/v1/query"),
        ("/prometheus/api/v1/query/", "/prometheus/api/v1/query/"),
        ("/prometheus/api/v1/query/.", "/prometheus/api/v1/query/"),
        ("/prometheus/api/v1/..", "/prometheus/api/"),
        ("/prometheus/../..", None),  # above the root: nginx answers 400
        ("/prometheus/api/v1/query%2F", None),  # an escape left after nginx decoded
        ("/prometheus/api/v1/query\\x", None),
        ("/prometheus/api/v1/query?x", None),
        ("/prometheus/api/v1/query#x", None),
        ("/prometheus/api/v1/query x", None),
        ("/prometheus/api/v1/qu\u00e9ry", None),
        ("/prometheus/api/v1/query\x00", None),
        ("prometheus/api/v1/query", None),
    ],
)
def test_it_reads_a_path_as_nginx_and_the_servers_do(path, normal):
    assert normalise(path) == normal


def test_every_listed_endpoint_needs_something_and_names_itself():
    for endpoint in ENDPOINTS:
        assert endpoint.what and endpoint.methods
        assert Need.NEVER not in endpoint.methods.values()
        assert set(endpoint.methods) <= {"GET", "HEAD", "POST", "DELETE"}


@pytest.mark.django_db
def test_no_one_logged_in_is_a_401(client):
    assert ask(client, "GET", "/prometheus/api/v1/targets").status_code == 401
    bad = ask(client, "GET", "/prometheus/api/v1/targets", Authorization="Bearer nope")
    assert bad.status_code == 401


@pytest.mark.django_db
def test_a_logged_in_user_reads_but_does_not_write(client, user):
    client.force_login(user)
    assert ask(client, "GET", "/prometheus/api/v1/targets").status_code == 204
    assert ask(client, "GET", "/alertmanager/api/v2/alerts").status_code == 204
    refused = ask(client, "POST", "/alertmanager/api/v2/silences")
    assert refused.status_code == 403
    assert "alerting.manage_alertmanager" in refused["X-Mac-Gate"]
    assert ask(client, "GET", "/alertmanager/api/v2/status").status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize(
    "uri",
    [
        "/prometheus/api/v1/admin/tsdb/delete_series",
        "/prometheus/prometheus/api/v1/admin/tsdb/delete_series",
        "/prometheus/api/v1/admin/tsdb%2Fdelete_series",
        "/prometheus/-/quit",
        "/prometheus/%2D/quit",
        "/prometheus//-/quit",
        "/prometheus/api/../-/quit",
        "/prometheus/snapshot/create",
        "/prometheus/internal/force_merge",
        "/prometheus/api/v1/query/../../../snapshot/delete_all",
        "/alertmanager/-/reload",
        "/alertmanager/%2D/reload",
    ],
)
def test_even_a_superuser_gets_no_odd_spelling_through_by_get(client, staff, uri):
    """GET, not only POST: a gate that let GETs through as reads would pass these."""
    client.force_login(staff)
    for method in ("GET", "POST"):
        refused = ask(client, method, gate_uri(uri))
        assert refused.status_code == 403, (method, uri)
        assert refused["X-Mac-Gate"]


@pytest.mark.django_db
def test_an_api_token_stands_for_its_user_in_either_spelling(client, user):
    key = Token.objects.create(user=user).key
    for scheme in ("Bearer", "Token"):
        answer = ask(client, "GET", "/prometheus/api/v1/query", Authorization=f"{scheme} {key}")
        assert answer.status_code == 204


@pytest.mark.django_db
def test_the_permission_lets_a_user_silence(client, django_user_model):
    user = django_user_model.objects.create_user("oncall", password="x")
    user.user_permissions.add(Permission.objects.get(codename="manage_alertmanager"))
    key = Token.objects.create(user=user).key

    answer = ask(client, "POST", "/alertmanager/api/v2/silences", Authorization=f"Bearer {key}")

    assert answer.status_code == 204
    assert (
        ask(client, "POST", "/prometheus/-/quit", Authorization=f"Bearer {key}").status_code == 403
    )


@pytest.mark.django_db
def test_a_session_write_from_another_sites_page_is_refused(client, staff):
    client.force_login(staff)
    same = ask(client, "POST", "/alertmanager/api/v2/silences", Origin="http://testserver")
    other = ask(client, "POST", "/alertmanager/api/v2/silences", Origin="https://evil.example")

    assert same.status_code == 204
    assert other.status_code == 403 and "Origin" in other["X-Mac-Gate"]


@pytest.mark.django_db
def test_even_a_superuser_never_passes_quit(client, staff):
    client.force_login(staff)
    for method in ("GET", "POST"):
        refused = ask(client, method, "/prometheus/-/quit")
        assert refused.status_code == 403
        assert "lifecycle" in refused["X-Mac-Gate"]


@pytest.mark.django_db
def test_it_answers_only_subrequests_it_understands(client, staff):
    client.force_login(staff)
    assert client.get(GATE).status_code == 403
    assert ask(client, "GET", "/admin/").status_code == 403
    assert ask(client, "GET", "/prometheus").status_code == 403


def test_docs_security_md_shows_the_list_the_gate_uses():
    """docs/security.md carries ENDPOINTS as a table; after a change to the list, paste
    `python -m django shell -c "from macweb.monitoring_gate import markdown_table;
    print(markdown_table())"` between its gate-table markers."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    start = text.index("<!-- gate table: markdown_table() of macweb/monitoring_gate.py -->\n")
    end = text.index("<!-- end of gate table -->")
    shown = text[start:end].split("\n", 1)[1]
    assert shown == markdown_table()
