"""`manage.py createadmin`: an admin who can log in, created or updated without prompts."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def run(monkeypatch, **env) -> str:
    for name in ("MAC_ADMIN_USER", "MAC_ADMIN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    call_command("createadmin", stdout=out)
    return out.getvalue()


def test_it_creates_a_superuser_with_a_generated_password_shown_once(monkeypatch, client):
    first = run(monkeypatch)
    password = first.split("password: ")[1].split()[0]

    second = run(monkeypatch)

    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.is_staff
    assert "password unchanged" in second and password not in second
    assert client.login(username="admin", password=password)


def test_it_sets_the_password_from_the_environment_each_run(monkeypatch, client):
    run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="first-password")
    out = run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="second-password")

    assert "Updated admin user 'ops'" in out
    assert get_user_model().objects.filter(username="ops").count() == 1
    assert client.login(username="ops", password="second-password")
    assert client.get("/admin/").status_code == 200


def test_an_unchanged_password_keeps_every_admin_logged_in(monkeypatch, client):
    run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="steady-password")
    assert client.login(username="ops", password="steady-password")
    stored = get_user_model().objects.get(username="ops").password

    out = run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="steady-password")

    assert "already is MAC_ADMIN_PASSWORD" in out
    assert get_user_model().objects.get(username="ops").password == stored
    # The session made before the rerun is still good: the hash it was bound to is unchanged.
    assert client.get("/admin/").status_code == 200


def test_a_changed_password_ends_the_old_sessions(monkeypatch, client):
    run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="first-password")
    assert client.login(username="ops", password="first-password")

    run(monkeypatch, MAC_ADMIN_USER="ops", MAC_ADMIN_PASSWORD="second-password")

    assert client.get("/admin/").status_code == 302  # back to the login page


def test_it_refuses_a_short_password(monkeypatch):
    with pytest.raises(CommandError, match="MAC_ADMIN_PASSWORD"):
        run(monkeypatch, MAC_ADMIN_PASSWORD="short")
