"""A channel cannot be aimed inside the master (issues 22 and 31): loopback, link-local,
cloud metadata and the master's own addresses are refused with the field named (url or
smtp_host), in the API and the admin, unless MAC_CHANNEL_ALLOWED_NETWORKS allows them, and
the master's own servers' ports never; a name must resolve; and channels follow Django's
model permissions, not is_staff. (Held back later: test_held_channels.py.)"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import pytest
import yaml
from django.contrib.auth.models import Permission

from alerting import services
from alerting.models import NotificationChannel
from testkit.ports import free_port
from tests.alerting.test_admin import ADD, form

pytestmark = pytest.mark.django_db

URL = "/api/v1/alert-channels/"


@pytest.fixture
def no_allowlist(settings, am_settings):
    settings.CHANNEL_ALLOWED_NETWORKS = []
    return settings


@pytest.fixture
def staff_client(api_client, staff):
    api_client.force_authenticate(staff)
    return api_client


def _own_address() -> str:
    """This host's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this host has no route off the loopback")
        return probe.getsockname()[0]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:9093/api/v2/alerts", "is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata address"),
        ("http://169.254.10.20/hook", "is a link-local address"),
        ("http://[::1]:8080/hook", "is a loopback address"),
        ("http://localhost:29093/hook", "localhost (resolves to"),
        # Another spelling of 127.0.0.1 is checked by what it names.
        ("http://[::ffff:127.0.0.1]/hook", "resolves to 127.0.0.1"),
    ],
)
def test_an_address_inside_is_a_400_naming_the_url(staff_client, no_allowlist, url, said):
    response = staff_client.post(URL, {"name": "in", "kind": "webhook", "url": url}, format="json")

    assert response.status_code == 400, response.content
    [message] = response.json()["url"]
    assert said in message
    assert "MAC_CHANNEL_ALLOWED_NETWORKS" in message
    assert not NotificationChannel.objects.exists()


def test_the_masters_own_address_is_refused(staff_client, no_allowlist):
    own = _own_address()
    response = staff_client.post(
        URL, {"name": "own", "kind": "slack", "url": f"https://{own}/services/x"}, format="json"
    )

    assert response.status_code == 400
    assert "one of the master's own addresses" in response.json()["url"][0]


def _taken(response, name: str, url: str) -> None:
    """Saved, with nothing against it, and in the alertmanager.yml that MAC wrote."""
    assert response.status_code == 201, response.content
    channel = NotificationChannel.objects.get(name=name)
    assert (channel.url, channel.config_error) == (url, "")
    written = yaml.safe_load(services.config_path().read_text())
    receivers = {receiver["name"]: receiver for receiver in written["receivers"]}
    assert channel.receiver_name in receivers, sorted(receivers)
    hooks = receivers[channel.receiver_name]["webhook_configs"]
    assert [hook["url"] for hook in hooks] == [url]


def test_an_address_on_the_sites_network_is_taken(staff_client, no_allowlist):
    url = "http://192.0.2.10/hook"
    body = {"name": "chat", "kind": "webhook", "url": url}
    response = staff_client.post(URL, body, format="json")

    _taken(response, "chat", url)


def test_the_allowlist_lets_a_site_use_its_loopback(staff_client, no_allowlist):
    no_allowlist.CHANNEL_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]
    url = f"http://127.0.0.1:{free_port()}/hook"
    response = staff_client.post(
        URL, {"name": "relay", "kind": "webhook", "url": url}, format="json"
    )

    _taken(response, "relay", url)


def test_the_admin_form_names_the_url_too(admin_client, no_allowlist):
    response = admin_client.post(ADD, form(url="http://169.254.169.254/"))

    assert response.status_code == 200
    assert "is a cloud metadata address" in response.content.decode()
    assert not NotificationChannel.objects.exists()


def test_channels_follow_the_model_permissions(api_client, django_user_model, no_allowlist):
    # Staff alone is not enough: the permissions are.
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    api_client.force_authenticate(user)
    body = {"name": "chat", "kind": "webhook", "url": "http://192.0.2.10/hook"}
    assert api_client.get(URL).status_code == 403
    assert api_client.post(URL, body, format="json").status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="view_notificationchannel"))
    user = django_user_model.objects.get(pk=user.pk)  # a fresh permission cache
    api_client.force_authenticate(user)
    assert api_client.get(URL).status_code == 200
    assert api_client.post(URL, body, format="json").status_code == 403

    user.user_permissions.add(Permission.objects.get(codename="add_notificationchannel"))
    user = django_user_model.objects.get(pk=user.pk)
    api_client.force_authenticate(user)
    created = api_client.post(URL, body, format="json")
    assert created.status_code == 201, created.content
    # Sending a test notification changes nothing, but it is the change permission's.
    assert api_client.post(f"{URL}{created.json()['id']}/test/").status_code == 403


def test_a_name_that_does_not_resolve_is_a_400_naming_the_url(staff_client, no_allowlist):
    body = {"name": "typo", "kind": "webhook", "url": "https://hooks.exmaple.test/mac"}
    response = staff_client.post(URL, body, format="json")

    assert response.status_code == 400
    [message] = response.json()["url"]
    assert message.startswith("hooks.exmaple.test does not resolve (")
    assert not NotificationChannel.objects.exists()


def test_a_name_with_one_address_inside_is_refused(staff_client, no_allowlist, site_dns):
    site_dns.point("hooks.example.test", "192.0.2.10", "127.0.0.1")
    body = {"name": "two faced", "kind": "webhook", "url": "http://hooks.example.test/mac"}
    response = staff_client.post(URL, body, format="json")

    assert response.status_code == 400
    [message] = response.json()["url"]
    assert message.startswith("hooks.example.test (resolves to 127.0.0.1) is a loopback address")


MAIL = {"name": "mail", "kind": "email", "email_to": "ops@example.test",
        "smtp_from": "mac@example.test"}  # fmt: skip


def test_an_smtp_server_inside_is_a_400_naming_smtp_host(staff_client, no_allowlist):
    body = {**MAIL, "smtp_host": "127.0.0.1", "smtp_port": 6379}
    response = staff_client.post(URL, body, format="json")

    assert response.status_code == 400, response.content
    [message] = response.json()["smtp_host"]
    assert message.startswith("127.0.0.1 is a loopback address")
    assert not NotificationChannel.objects.exists()


def test_an_smtp_name_that_does_not_resolve_is_refused(staff_client, no_allowlist):
    response = staff_client.post(URL, {**MAIL, "smtp_host": "mail.nowhere.test"}, format="json")

    assert response.status_code == 400
    assert "mail.nowhere.test does not resolve" in response.json()["smtp_host"][0]


def test_the_allowlist_never_opens_the_masters_own_servers(staff_client, settings):
    # conftest allows 127.0.0.0/8; Redis (MAC_REDIS_URL) stays closed all the same.
    redis_port = urlsplit(settings.REDIS_URL).port
    mail = {**MAIL, "smtp_host": "127.0.0.1", "smtp_port": redis_port}
    hook = {"name": "prom", "kind": "webhook", "url": "http://127.0.0.1:29090/api/v1/admin"}

    refused_mail = staff_client.post(URL, mail, format="json")
    refused_hook = staff_client.post(URL, hook, format="json")

    assert refused_mail.status_code == 400
    assert (
        f"127.0.0.1, port {redis_port}, is the master's own Redis"
        in (refused_mail.json()["smtp_host"][0])
    )
    assert refused_hook.status_code == 400
    assert "port 29090, is the master's own Prometheus" in refused_hook.json()["url"][0]


def test_a_variable_aimed_inside_is_refused_naming_it(settings, no_allowlist):
    from alerting.services import ChannelError, channels_from_env

    settings.ALERT_EMAIL_TO, settings.SMTP_FROM = "ops@example.test", "mac@example.test"
    settings.SMTP_HOST, settings.SMTP_PORT = "127.0.0.1", 6379
    with pytest.raises(ChannelError, match=r"^MAC_SMTP_HOST: 127\.0\.0\.1 is a loopback"):
        channels_from_env()


def test_a_variable_whose_name_does_not_resolve_yet_is_saved_and_held_back(
    settings, no_allowlist, site_dns
):
    from alerting.services import apply_channels, channels_from_env

    settings.ALERT_WEBHOOK_URL = "http://hooks.later.test/mac"  # its DNS is not up yet
    channels_from_env()  # the master's start goes on
    apply_channels(reload=False)

    channel = NotificationChannel.objects.get()
    assert channel.pending_reason.startswith("hooks.later.test does not resolve any more")

    site_dns.point("hooks.later.test", "192.0.2.30")
    apply_channels(reload=False)
    channel.refresh_from_db()
    assert channel.pending_reason == ""
