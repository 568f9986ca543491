"""The gate nginx asks before /prometheus/ and /alertmanager/ (macweb.monitoring_gate):
who may read, who may write, what never passes. The real nginx in front of it, seen
from another host, is tests/maccli/test_front_door.py's."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token

from macweb.monitoring_gate import Need, classify

pytestmark = pytest.mark.django_db
GATE = "/auth/monitoring"


def ask(client, method: str, uri: str, **headers):
    return client.get(
        GATE,
        headers={"X-Original-Method": method, "X-Original-URI": uri, **headers},
    )


@pytest.mark.parametrize(
    ("server", "path", "method", "need"),
    [
        ("prometheus", "/api/v1/targets", "GET", Need.READ),
        ("prometheus", "/graph", "HEAD", Need.READ),
        ("prometheus", "/api/v1/query_range", "POST", Need.READ),  # Grafana
        ("prometheus", "/-/ready", "GET", Need.READ),
        ("prometheus", "/-/quit", "POST", Need.NEVER),
        ("prometheus", "/-/quit", "GET", Need.NEVER),
        ("prometheus", "/-/reload", "POST", Need.NEVER),
        ("prometheus", "/api/v1/admin/tsdb/delete_series", "POST", Need.NEVER),
        ("prometheus", "/api/v1/write", "POST", Need.NEVER),
        ("alertmanager", "/api/v2/alerts", "GET", Need.READ),
        ("alertmanager", "/api/v2/silences", "GET", Need.READ),
        ("alertmanager", "/api/v2/status", "GET", Need.MANAGE),  # the channels' secrets
        ("alertmanager", "/api/v2/silences", "POST", Need.MANAGE),
        ("alertmanager", "/api/v2/silence/8f1c", "DELETE", Need.MANAGE),
        ("alertmanager", "/api/v2/alerts", "POST", Need.MANAGE),
        ("alertmanager", "/-/reload", "POST", Need.NEVER),
    ],
)
def test_it_classifies_each_request(server, path, method, need):
    assert classify(server, path, method)[0] is need


def test_no_one_logged_in_is_a_401(client):
    assert ask(client, "GET", "/prometheus/api/v1/targets").status_code == 401
    bad = ask(client, "GET", "/prometheus/api/v1/targets", Authorization="Bearer nope")
    assert bad.status_code == 401


def test_a_logged_in_user_reads_but_does_not_write(client, user):
    client.force_login(user)
    assert ask(client, "GET", "/prometheus/api/v1/targets").status_code == 204
    assert ask(client, "GET", "/alertmanager/api/v2/alerts").status_code == 204
    refused = ask(client, "POST", "/alertmanager/api/v2/silences")
    assert refused.status_code == 403
    assert "alerting.manage_alertmanager" in refused["X-Mac-Gate"]
    assert ask(client, "GET", "/alertmanager/api/v2/status").status_code == 403


def test_an_api_token_stands_for_its_user_in_either_spelling(client, user):
    key = Token.objects.create(user=user).key
    for scheme in ("Bearer", "Token"):
        answer = ask(client, "GET", "/prometheus/api/v1/query", Authorization=f"{scheme} {key}")
        assert answer.status_code == 204


def test_the_permission_lets_a_user_silence(client, django_user_model):
    user = django_user_model.objects.create_user("oncall", password="x")
    user.user_permissions.add(Permission.objects.get(codename="manage_alertmanager"))
    key = Token.objects.create(user=user).key

    answer = ask(client, "POST", "/alertmanager/api/v2/silences", Authorization=f"Bearer {key}")

    assert answer.status_code == 204
    assert (
        ask(client, "POST", "/prometheus/-/quit", Authorization=f"Bearer {key}").status_code == 403
    )


def test_a_session_write_from_another_sites_page_is_refused(client, staff):
    client.force_login(staff)
    same = ask(client, "POST", "/alertmanager/api/v2/silences", Origin="http://testserver")
    other = ask(client, "POST", "/alertmanager/api/v2/silences", Origin="https://evil.example")

    assert same.status_code == 204
    assert other.status_code == 403 and "Origin" in other["X-Mac-Gate"]


def test_even_a_superuser_never_passes_quit(client, staff):
    client.force_login(staff)
    refused = ask(client, "POST", "/prometheus/-/quit")
    assert refused.status_code == 403
    assert "lifecycle" in refused["X-Mac-Gate"]


def test_it_answers_only_subrequests_it_understands(client, staff):
    client.force_login(staff)
    assert client.get(GATE).status_code == 403
    assert ask(client, "GET", "/admin/").status_code == 403
