"""Channels become Alertmanager's configuration: a real Alertmanager loads what MAC writes."""

from __future__ import annotations

import datetime as dt
import stat

import pytest

from alerting import nodealerts, services
from alerting.models import NotificationChannel
from alerting.nodealerts import offline_rows
from contract.diagnosis import DESCRIPTIONS
from testkit.alerting import body_text
from testkit.factories import offline_node
from tests.alerting.conftest import needs_alertmanager

pytestmark = [pytest.mark.django_db, needs_alertmanager]


def webhook_channel(name: str, url: str, **fields) -> NotificationChannel:
    channel = NotificationChannel(name=name, kind="webhook", url=url, **fields)
    services.save_channel(channel, actor="test")
    return channel


def loaded_receivers(alertmanager) -> str:
    return alertmanager.get("/api/v2/status")["config"]["original"]


def test_a_bad_channel_is_left_out_and_the_others_still_reach_alertmanager(alertmanager, webhook):
    good = webhook_channel("ops hook", webhook.url)
    bad = webhook_channel("broken filter", webhook.url, matchers=['rack=~"["'])

    bad.refresh_from_db()
    good.refresh_from_db()
    assert "missing closing ]" in bad.config_error
    assert good.config_error == "" and good.checked_at is not None
    loaded = loaded_receivers(alertmanager)
    assert good.receiver_name in loaded
    assert bad.receiver_name not in loaded


def test_a_channel_amtool_refuses_for_its_url_never_shows_the_url(alertmanager, webhook):
    # Django's validator takes it; Go's URL parser refuses it, and quotes it whole.
    secret = "https://203.0.113.5/services/T000/B000/SECRETTOKEN%zz"
    bad = webhook_channel("slack by hand", secret)

    bad.refresh_from_db()
    assert "invalid URL escape" in bad.config_error  # what is wrong, still said
    assert "SECRETTOKEN" not in bad.config_error and "T000" not in bad.config_error
    assert "https://203.0.113.5/\u2022\u2022\u2022\u2022" in bad.config_error


def test_the_configuration_file_is_private_and_rewritten_only_on_change(alertmanager, webhook):
    webhook_channel("ops hook", webhook.url)
    path = services.config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the channels' secrets
    before = path.stat().st_mtime_ns
    again = services.apply_channels()
    assert not again.written and path.stat().st_mtime_ns == before


def test_editing_a_channel_reloads_alertmanager_with_the_new_route(alertmanager, webhook):
    channel = webhook_channel("ops hook", webhook.url)
    assert 'cluster_name="prod"' not in loaded_receivers(alertmanager)

    channel.matchers = ['cluster_name="prod"']
    channel.severities = ["critical"]
    applied = services.save_channel(channel, actor="test")

    assert applied.reloaded
    loaded = loaded_receivers(alertmanager)
    assert 'cluster_name="prod"' in loaded and 'severity=~"critical"' in loaded


def test_a_test_notification_reaches_that_channel_only(alertmanager, webhook):
    chosen = webhook_channel("chosen", webhook.url + "?to=chosen")
    webhook_channel("other", webhook.url + "?to=other")

    said = services.send_test_notification(chosen, actor="admin:tester")

    assert "chosen" in said
    got = webhook.wait_for(lambda body: body["receiver"] == chosen.receiver_name, timeout=20)
    assert got is not None
    assert got.body["alerts"][0]["labels"]["alertname"] == "MacTestNotification"
    assert not webhook.matching(lambda body: body["receiver"] != chosen.receiver_name)


def test_a_disabled_or_refused_channel_says_why_it_cannot_be_tested(alertmanager, webhook):
    off = webhook_channel("off", webhook.url, enabled=False)
    with pytest.raises(services.ChannelError, match="disabled"):
        services.send_test_notification(off, actor="test")
    bad = webhook_channel("bad", webhook.url, matchers=['rack=~"["'])
    with pytest.raises(services.ChannelError, match="left out"):
        services.send_test_notification(bad, actor="test")


def test_an_offline_node_email_carries_host_reason_diagnosis_fix_and_link(
    alertmanager, smtp, am_settings
):
    am_settings.PUBLIC_URL = "http://mac.example.test:28080"
    channel = NotificationChannel(
        name="ops mail", kind="email", email_to="ops@example.test", smtp_host="127.0.0.1",
        smtp_port=smtp.port, smtp_from="mac@example.test", smtp_require_tls=False,
        severities=["critical"],
    )  # fmt: skip
    services.save_channel(channel, actor="test")
    node = offline_node("gpu-42", "10.0.0.42")
    now = dt.datetime.now(dt.UTC)
    # The alert as the master posts MacNodeOffline: identities in labels, words in
    # annotations (alerting.nodealerts).
    alertmanager_client = services.Alertmanager.from_settings()
    alertmanager_client.post_alerts([nodealerts.firing_alert(offline_rows()[0], now)])

    message = smtp.wait_for(lambda m: "MacNodeOffline" in m["Subject"], timeout=30)

    assert message is not None
    assert message["Subject"] == "[MAC FIRING:1] MacNodeOffline: gpu-42"
    assert message["To"] == "ops@example.test"
    text = body_text(message)
    text_of, fix = DESCRIPTIONS["ip_forward_off"]
    assert "Host:      gpu-42" in text
    assert "Reason:    sys-exporter timed out" in text
    assert "Diagnosis: IPv4 forwarding is off on the agent" in text
    assert " ".join(text_of.split()) in " ".join(text.split())
    assert "sudo sysctl -w net.ipv4.ip_forward=1" in text and fix.splitlines()[0] in text
    assert f"Node page: http://mac.example.test:28080/nodes/{node.pk}/" in text
    assert f"Since:     {node.status_changed_at:%Y-%m-%d %H:%M}" in text


def test_the_node_route_sends_changes_after_one_probe_interval_per_node(alertmanager, webhook):
    """A node that dies again is paged within a probe interval, not MAC_ALERT_GROUP_INTERVAL;
    reminders still follow MAC_ALERT_REPEAT_INTERVAL (inherited from the top route)."""
    import subprocess
    import sys

    import yaml

    webhook_channel("ops", webhook.url)
    config = yaml.safe_load(services.config_path().read_text())
    assert "mac-channel-" in loaded_receivers(alertmanager)  # Alertmanager loaded it
    [node] = [r for r in config["route"]["routes"] if "MacNodeOffline" in str(r.get("matchers"))]
    assert node["group_by"] == ["alertname", "cluster_name", "node", "down_since"]
    assert node["group_interval"] == "1s"  # am_settings: MAC_ALERT_NODE_GROUP_INTERVAL
    assert "repeat_interval" not in node
    assert config["route"]["repeat_interval"] == "4h"

    def default(interval: str) -> str:
        code = "from django.conf import settings; print(settings.ALERT_NODE_GROUP_INTERVAL)"
        env = {"MAC_PROBE_INTERVAL": interval, "DJANGO_SETTINGS_MODULE": "macweb.settings"}
        done = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {code}"],
            env={**__import__("os").environ, **env}, capture_output=True, text=True,
            timeout=120, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    assert (default("2"), default("5"), default("30"), default("0.5")) == ("2s", "5s", "5s", "1s")


GO_QUOTED = [
    # (the URL, how amtool quotes it back: Go's %q)
    ('https://203.0.113.5/services/T0/B0/se"cretTOKEN%zz', 'se\\"cretTOKEN'),
    ("https://203.0.113.5/services/T0/B0/se\\cretTOKEN%zz", "se\\\\cretTOKEN"),
    ("https://203.0.113.5/services/T0/B0/se\x01cretTOKEN", "se\\x01cretTOKEN"),
]


@pytest.mark.parametrize(("secret", "quoted"), GO_QUOTED)
def test_amtools_go_quoted_complaint_never_shows_the_url(tmp_path, secret, quoted):
    """A row saved before channel_errors refused these characters: amtool escapes them
    when it quotes the URL, and scrub() hides that form too."""
    from alerting import amconfig
    from alerting.secrets import scrub

    channel = NotificationChannel(pk=7, name="old", kind="webhook", url=secret)
    alone = amconfig.render_config([channel], tmp_path / "mac.tmpl", amconfig.Timing())
    complaint = amconfig.check_config(amconfig.dump(alone), amconfig.amtool_path())
    assert quoted in complaint  # what amtool really says

    shown = scrub(complaint, [channel])

    assert "cretTOKEN" not in shown and "T0" not in shown, shown
    assert "https://203.0.113.5/\u2022\u2022\u2022\u2022" in shown


@pytest.mark.parametrize(("secret", "quoted"), GO_QUOTED)
def test_a_stored_url_amtool_would_quote_escaped_is_left_out_naming_url(
    alertmanager, secret, quoted
):
    bad = NotificationChannel.objects.create(name="old", kind="webhook", url=secret)

    services.apply_channels()

    bad.refresh_from_db()
    assert bad.config_error.startswith("url: must not contain"), bad.config_error
    assert "cretTOKEN" not in bad.config_error
    assert bad.receiver_name not in loaded_receivers(alertmanager)


def email_channel(port: int, **fields) -> NotificationChannel:
    channel = NotificationChannel(
        name=f"mail {port}", kind="email", email_to="ops@example.test", smtp_host="127.0.0.1",
        smtp_port=port, smtp_from="mac@example.test", **fields,
    )  # fmt: skip
    services.save_channel(channel, actor="test")
    return channel


def test_port_465_is_tls_from_the_start_so_starttls_is_not_required(alertmanager):
    """On 465 Alertmanager opens TLS first, then would still ask for STARTTLS, which no
    such server offers: require_tls is false there, whatever the box says."""
    import yaml

    implicit = email_channel(465, smtp_require_tls=True)
    starttls = email_channel(587, smtp_require_tls=True)
    plain = email_channel(2525, smtp_require_tls=False)

    config = yaml.safe_load(services.config_path().read_text())
    tls = {r["name"]: r["email_configs"][0]["require_tls"] for r in config["receivers"][1:]}
    assert tls == {
        implicit.receiver_name: False,
        starttls.receiver_name: True,
        plain.receiver_name: False,
    }
    assert implicit.receiver_name in loaded_receivers(alertmanager)


def self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mac test smtp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(__import__("ipaddress").ip_address(
                "127.0.0.1"))]), critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = directory / "smtp.crt", directory / "smtp.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file)


@pytest.fixture
def smtps(tmp_path, monkeypatch):
    """An SMTP server with TLS from the start (SMTPS) on 127.0.0.1:465, the port on which
    Alertmanager dials TLS itself; Alertmanager trusts its certificate (SSL_CERT_FILE,
    read by Go at its start: this fixture comes before the `alertmanager` one)."""
    import email
    import email.policy
    import socket
    import ssl
    import threading

    from aiosmtpd.controller import Controller

    try:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", 465))
    except OSError as exc:
        pytest.skip(f"127.0.0.1:465 cannot be bound here ({exc})")
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    received: list = []
    arrived = threading.Event()

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            received.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
            arrived.set()
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=465, ssl_context=context)
    controller.start()
    yield received, arrived
    controller.stop()


def test_an_email_channel_on_port_465_delivers(smtps, alertmanager):
    received, arrived = smtps
    channel = email_channel(465, smtp_require_tls=True)  # the form's default

    said = services.send_test_notification(channel, actor="admin:tester")

    assert "mail 465" in said
    assert arrived.wait(30), (alertmanager.data / "alertmanager.log").read_text()[-2000:]
    assert "Test notification from MAC" in received[0]["Subject"] + body_text(received[0])
