"""A real Alertmanager per test, configured by MAC from the test's channels."""

from __future__ import annotations

import ipaddress
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from alerting import destinations, services
from testkit.alerting import AlertmanagerServer, SmtpSink, WebhookReceiver
from testkit.ports import free_port

needs_alertmanager = pytest.mark.skipif(
    not shutil.which("prometheus-alertmanager") or not shutil.which("amtool"),
    reason="Debian's prometheus-alertmanager (alertmanager and amtool) is not installed",
)


@pytest.fixture(autouse=True)
def receivers_on_loopback(settings):
    """The tests' webhook receivers listen on 127.0.0.1, which channels may not point at
    unless the site allows it (alerting.destinations): these tests allow it."""
    settings.CHANNEL_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]


@dataclass
class SiteDns:
    """The site's DNS as the master sees it, for the names a test gives its channels.

    It stands in for the one lookup of alerting.destinations (socket.getaddrinfo's
    signature and answers): a name in `names` resolves to its addresses, which a test
    may re-point; any other name does not resolve. Addresses and `localhost` are the
    system's own answer. So a test never asks the machine's DNS for a made-up name.
    """

    names: dict[str, list[str]] = field(
        default_factory=lambda: {
            "hooks.example.test": ["192.0.2.10"],
            "hooks.slack.example.test": ["192.0.2.11"],
            "smtp.example.test": ["192.0.2.25"],
        }
    )

    def point(self, name: str, *addresses: str) -> None:
        self.names[name] = list(addresses)

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        literal = host.strip("[]")
        try:
            ipaddress.ip_address(literal.split("%")[0])
        except ValueError:
            if host != "localhost":
                return self._answer(host, port, proto)
        return socket.getaddrinfo(host, port, family, type, proto, flags)

    def _answer(self, host: str, port, proto: int) -> list:
        addresses = self.names.get(host.lower().rstrip("."))
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = []
        for address in addresses:
            version = ipaddress.ip_address(address).version
            family = socket.AF_INET if version == 4 else socket.AF_INET6
            sockaddr = (address, port or 0) if version == 4 else (address, port or 0, 0, 0)
            answer.append((family, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP, "", sockaddr))
        return answer


@pytest.fixture(autouse=True)
def site_dns(monkeypatch) -> SiteDns:
    dns = SiteDns()
    monkeypatch.setattr(destinations, "getaddrinfo", dns.getaddrinfo)
    return dns


@pytest.fixture
def am_settings(settings, tmp_path):
    """MAC's settings pointed at a private Alertmanager folder and a free port."""
    settings.ALERTMANAGER_DIR = tmp_path / "alertmanager"
    settings.ALERTMANAGER_URL = f"http://127.0.0.1:{free_port()}"
    settings.ALERTMANAGER_MANAGED = True
    settings.ALERT_GROUP_WAIT = "0s"
    settings.ALERT_NODE_GROUP_WAIT = "0s"
    settings.ALERT_GROUP_INTERVAL = "1s"
    settings.ALERT_NODE_GROUP_INTERVAL = "1s"
    return settings


@pytest.fixture
def alertmanager(am_settings, tmp_path) -> Iterator[AlertmanagerServer]:
    """Debian's Alertmanager started on the configuration MAC wrote (no channel yet)."""
    services.apply_channels(reload=False)
    port = int(am_settings.ALERTMANAGER_URL.rsplit(":", 1)[1])
    server = AlertmanagerServer(
        services.config_path(), tmp_path / "alertmanager-data", port=port
    ).start()
    yield server
    server.stop()


@pytest.fixture
def webhook() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    yield sink
    sink.close()


@pytest.fixture
def node_alert_hook(alertmanager, webhook):
    """A webhook channel to this test's receiver, loaded into its Alertmanager."""
    from alerting.models import NotificationChannel

    channel = NotificationChannel(name="node alerts hook", kind="webhook", url=webhook.url)
    services.save_channel(channel, actor="test")
    return webhook
