"""The master answers only to its own names and addresses, and its password-reset mail
links to MAC_PUBLIC_URL, never to the request's Host (issue 31)."""

from __future__ import annotations

import re
import socket

import pytest

from macweb.hosts import COMPOSE_NAMES, MasterHosts, master_hosts
from testkit.alerting import SmtpSink

pytestmark = pytest.mark.django_db

PUBLIC = "https://mac.example.test:28443"


def hosts(**given) -> list[str] | MasterHosts:
    settings = {
        "extra": [],
        "tls_names": ["gpu-master.site.test", "203.0.113.9"],
        "host_names": ["198.51.100.4", "master-01", "master-01.site.test"],
        "host_addresses": ["198.51.100.4", "2001:db8::4"],
        "public_url": PUBLIC,
        **given,
    }
    return master_hosts(**settings)


@pytest.fixture
def master_names(settings):
    # What the Django test client sends, as setup_test_environment adds it.
    settings.ALLOWED_HOSTS = MasterHosts([*hosts(), "testserver"])
    return settings


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:28080", "localhost:28080", "[::1]:28080", "mac.example.test:28443",
        "gpu-master.site.test", "203.0.113.9:28080", "master-01.site.test:28080",
        "198.51.100.4:28080", "[2001:db8::4]:28443", "api-server:28080", "mac-proxy:28443",
        f"{socket.gethostname()}:28080",
    ],
)  # fmt: skip
def test_the_masters_own_names_and_addresses_are_answered(client, master_names, host):
    assert client.get("/health", HTTP_HOST=host).status_code in (200, 503)


def test_another_host_name_is_a_400_that_says_what_to_do(client, master_names):
    response = client.get("/health", HTTP_HOST="evil.example")

    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "does not answer to the name 'evil.example'" in detail
    assert "MAC_TLS_NAMES" in detail and "MAC_ALLOWED_HOSTS" in detail


def test_the_compose_names_are_the_ones_the_compose_file_uses():
    from pathlib import Path

    import yaml

    compose = Path(__file__).resolve().parents[2] / "docker" / "docker-compose.master.yml"
    services = yaml.safe_load(compose.read_text())["services"]
    for name in ("api-server", "proxy"):
        assert name in COMPOSE_NAMES and f"mac-{name}" in COMPOSE_NAMES
        assert services[name]["container_name"] == f"mac-{name}"


def test_allowed_hosts_adds_names_and_a_star_answers_any():
    assert ".site.test" in hosts(extra=[".site.test"])
    assert hosts(extra=["*"]) == ["*"]


def test_an_address_that_comes_up_later_is_answered_without_a_restart():
    found = [["10.0.0.5"]]
    allowed = MasterHosts(["localhost"], addresses=lambda: found[0])
    assert "10.0.0.5" in allowed and "10.0.0.6" not in allowed

    found[0] = ["10.0.0.5", "10.0.0.6", "fe80::1%eth0"]

    assert "10.0.0.6" in allowed
    assert [*iter(allowed)] == ["localhost", "10.0.0.5", "10.0.0.6", "[fe80::1]"]


def test_this_hosts_interfaces_are_answered_as_they_are_now():
    allowed = MasterHosts(["localhost"])
    assert "127.0.0.1" in allowed  # the loopback interface, from psutil


@pytest.fixture
def smtp(settings):
    """Django's real SMTP backend, to a real aiosmtpd server on loopback."""
    sink = SmtpSink()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sink.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield sink
    sink.close()


def test_a_reset_mail_links_to_the_public_url_not_to_the_requests_host(
    client, master_names, smtp, django_user_model
):
    master_names.PUBLIC_URL = PUBLIC
    django_user_model.objects.create_user("ops", email="ops@example.test", password="x")

    response = client.post(
        "/accounts/password_reset/", {"email": "ops@example.test"}, HTTP_HOST="127.0.0.1:28080"
    )

    assert response.status_code == 302, response.content
    message = smtp.wait_for(lambda m: m["To"] == "ops@example.test", timeout=10)
    assert message is not None
    text = message.get_body(("plain",)).get_content()
    [link] = re.findall(r"https?://\S+", text)
    assert link.startswith(f"{PUBLIC}/accounts/reset/"), text
    assert "127.0.0.1" not in text
    assert "mac.example.test:28443" in message["Subject"]


def test_a_forged_host_sends_no_reset_mail(client, master_names, smtp, django_user_model):
    django_user_model.objects.create_user("ops", email="ops@example.test", password="x")

    response = client.post(
        "/accounts/password_reset/", {"email": "ops@example.test"}, HTTP_HOST="evil.example"
    )

    assert response.status_code == 400
    assert smtp.messages == []
