"""alertmanager.yml from the notification channels, each channel checked on its own.

Layout of the configuration (render_config):

    route:                      group_by [alertname, cluster_name], MAC_ALERT_GROUP_*
      receiver: mac-nobody      what no channel wants goes nowhere
      routes:
        - mac_test_channel=~".+"          test notifications (send_test_notification),
          routes: one per channel         each only to its own channel, at once
        - alertname=~"MacNodeOffline|MacGpu..."   the alerts the master posts itself (node
          group_wait MAC_ALERT_NODE_GROUP_WAIT    offline, GPU verdicts, drain budget):
          group_interval MAC_ALERT_NODE_GROUP_INTERVAL   group_by node and down_since:
          routes: one per channel         one incident of one node is one notification,
                                          sent seconds after the master's post
                                          (alerting.nodealerts)
        - one route per channel:  severity and label matchers, continue: true
    receivers: mac-nobody, mac-channel-<id> ...
    templates: [<MAC_ALERTMANAGER_DIR>/mac.tmpl]   (alerting.amtemplate)

An incident's group sends its end after the route's group_interval, the probe interval
up to 5 s by default; a node that dies again is a new incident, so a new group, paged
after group_wait (seconds), not 5 minutes later, and grouping per node keeps every other
node out of it. An unchanged alert is repeated only after repeat_interval. An incident
shorter than group_wait (a node that bounces between two sweeps) is never sent: raise
MAC_ALERT_NODE_GROUP_WAIT to fold such flaps.

Every receiver that speaks HTTP (webhook, Slack) carries `http_config: follow_redirects:
false`: Alertmanager follows redirects by default, and a receiver answering
`307 Location: http://127.0.0.1:...` would make the master reach its own loopback
(alerting.destinations). A channel whose name now resolves inside the master is held
back at each generation (Build.held: pending, not rendered).

A bad channel never breaks the others: each channel's receiver and route are first
put in a configuration of their own and checked with `amtool check-config` (Debian's
prometheus-alertmanager, the same parser Alertmanager uses); a channel it refuses is
left out, and its `config_error` says why (the admin and /health show it). The file is
replaced atomically (contract.atomicfile), mode 0600 since it holds the channels'
secrets, and only when its content changes.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.conf import settings

from alerting.amtemplate import TEMPLATE_FILE, render_templates
from alerting.choices import ChannelKind, Severity
from alerting.destinations import held_back
from alerting.drainalert import ALERTNAME as DRAIN_BUDGET_ALERTNAME
from alerting.models import NotificationChannel, channel_errors
from alerting.nodealerts import INCIDENT_LABEL, POSTED_ALERTNAMES
from alerting.secrets import scrub
from contract.atomicfile import write_atomically

CONFIG_FILE = "alertmanager.yml"
NOBODY = "mac-nobody"
TEST_LABEL = "mac_test_channel"
GROUP_BY = ["alertname", "cluster_name"]
# The alerts the master posts itself, already decided (alerting.nodealerts, gpualerts,
# and the drain's budget alert, alerting.drainalert).
NODE_ALERTNAMES = (*POSTED_ALERTNAMES, DRAIN_BUDGET_ALERTNAME)
# Per node, and per incident of a node (alerting.nodealerts: why). The GPU verdicts and
# the drain budget carry no down_since: they group per node and per cluster.
NODE_GROUP_BY = ["alertname", "cluster_name", "node", INCIDENT_LABEL]
HEADER = (
    "# Alertmanager configuration of the MAC master, generated from the notification\n"
    "# channels (Django admin > Alerts, or /api/v1/alert-channels/) by\n"
    "# alerting.amconfig; edits here are overwritten. docs/alerts.md explains it.\n"
)
AMTOOL_TIMEOUT = 20


@dataclass
class Timing:
    """How long Alertmanager waits before the first notification of a group, and between."""

    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    node_group_wait: str = "3s"  # node alerts: the master posts them already decided
    node_group_interval: str = "30s"  # and decides again at every sweep

    @classmethod
    def from_settings(cls) -> Timing:
        return cls(
            settings.ALERT_GROUP_WAIT,
            settings.ALERT_GROUP_INTERVAL,
            settings.ALERT_REPEAT_INTERVAL,
            settings.ALERT_NODE_GROUP_WAIT,
            settings.ALERT_NODE_GROUP_INTERVAL,
        )


@dataclass
class Build:
    """A rendered configuration and what was left out of it."""

    text: str
    included: list[int] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)  # channel id -> why it is left out
    # channel id -> why it is held back for now: its name resolves inside the master, or
    # not at all (alerting.destinations.held_back); pending until it resolves outside.
    held: dict[int, str] = field(default_factory=dict)


# SMTPS: Alertmanager opens TLS first on this port (and only on this one).
IMPLICIT_TLS_PORT = 465
# Every http_config MAC writes: a redirect is an answer, never a second request.
HTTP_CONFIG = {"follow_redirects": False}


def receiver(channel: NotificationChannel) -> dict:
    """The channel as an Alertmanager receiver."""
    entry: dict = {"name": channel.receiver_name}
    if channel.kind == ChannelKind.EMAIL:
        config = {
            "to": ", ".join(channel.email_addresses()),
            "from": channel.smtp_from,
            "smarthost": f"{_host(channel.smtp_host)}:{channel.smtp_port}",
            # Port 465 is TLS from the start (Alertmanager dials it so), and then no
            # server offers STARTTLS on top: asking for it fails every send. Django's
            # own mail decides the same way (macweb.settings, EMAIL_USE_SSL).
            "require_tls": channel.smtp_require_tls and channel.smtp_port != IMPLICIT_TLS_PORT,
            "send_resolved": channel.send_resolved,
            "headers": {"Subject": '{{ template "mac.email.subject" . }}'},
            "text": '{{ template "mac.email.text" . }}',
            "html": '{{ template "mac.email.html" . }}',
        }
        if channel.smtp_user:
            config["auth_username"] = channel.smtp_user
            config["auth_password"] = channel.smtp_password
        entry["email_configs"] = [config]
    elif channel.kind == ChannelKind.WEBHOOK:
        entry["webhook_configs"] = [
            {
                "url": channel.url,
                "send_resolved": channel.send_resolved,
                "http_config": dict(HTTP_CONFIG),
            }
        ]
    elif channel.kind == ChannelKind.SLACK:
        entry["slack_configs"] = [
            {
                "api_url": channel.url,
                "send_resolved": channel.send_resolved,
                "title": '{{ template "mac.slack.title" . }}',
                "text": '{{ template "mac.slack.text" . }}',
                "http_config": dict(HTTP_CONFIG),
            }
        ]
    return entry


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def route(channel: NotificationChannel) -> dict:
    """The channel's filters as a route; `continue` lets every matching channel notify."""
    matchers = []
    severities = sorted(set(channel.severities))
    if severities and set(severities) != set(Severity.values):
        matchers.append(f'severity=~"{"|".join(severities)}"')
    matchers.extend(item.strip() for item in channel.matchers)
    entry: dict = {"receiver": channel.receiver_name}
    if matchers:
        entry["matchers"] = matchers
    entry["continue"] = True
    return entry


def test_route(channel: NotificationChannel) -> dict:
    """A test notification for this channel goes to it alone, without waiting."""
    return {
        "receiver": channel.receiver_name,
        "matchers": [f'{TEST_LABEL}="{channel.pk}"'],
        "group_by": [TEST_LABEL, "mac_test_id"],
        "group_wait": "0s",
    }


def node_route(channels: list[NotificationChannel], timing: Timing) -> dict:
    """Node alerts wait only a few seconds and group per node and incident; then every
    channel's route."""
    entry: dict = {
        "receiver": NOBODY,
        "matchers": [f'alertname=~"{"|".join(NODE_ALERTNAMES)}"'],
        "group_by": NODE_GROUP_BY,
        "group_wait": timing.node_group_wait,
        "group_interval": timing.node_group_interval,
    }
    if channels:
        entry["routes"] = [route(channel) for channel in channels]
    return entry


def render_config(
    channels: Iterable[NotificationChannel], template_path: Path, timing: Timing
) -> dict:
    """The configuration for these channels (already checked) as a dict."""
    channels = list(channels)
    routes: list[dict] = []
    if channels:
        routes.append(
            {
                "receiver": NOBODY,
                "matchers": [f'{TEST_LABEL}=~".+"'],
                "routes": [test_route(channel) for channel in channels],
            }
        )
    routes.append(node_route(channels, timing))
    routes.extend(route(channel) for channel in channels)
    top: dict = {
        "receiver": NOBODY,
        "group_by": GROUP_BY,
        "group_wait": timing.group_wait,
        "group_interval": timing.group_interval,
        "repeat_interval": timing.repeat_interval,
    }
    if routes:
        top["routes"] = routes
    return {
        "templates": [str(template_path)],
        "route": top,
        "receivers": [{"name": NOBODY}, *(receiver(channel) for channel in channels)],
    }


def dump(config: dict) -> str:
    return HEADER + yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=1000)


def amtool_path() -> str | None:
    return shutil.which(settings.AMTOOL_BIN)


def check_config(text: str, amtool: str | None) -> str:
    """Why Alertmanager would refuse this configuration ("" when it would load it).

    Without amtool only MAC's own field checks (models.channel_errors) stand guard; the
    reload then reports what Alertmanager itself refuses.
    """
    if amtool is None:
        return ""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="mac-am-check-") as handle:
        handle.write(text)
        handle.flush()
        try:
            run = subprocess.run(
                [amtool, "check-config", handle.name],
                capture_output=True,
                text=True,
                timeout=AMTOOL_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"amtool check-config could not run: {exc}"
    if run.returncode == 0:
        return ""
    return _amtool_reason(run.stdout + run.stderr)


def _amtool_reason(output: str) -> str:
    """amtool's complaint (`Checking 'FILE'  FAILED: <why>`) without the file's name."""
    for line in output.splitlines():
        if "FAILED:" in line:
            return line.split("FAILED:", 1)[1].strip()[:500]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return (" ".join(lines) or "amtool check-config refused it")[:500]


def build(channels: Iterable[NotificationChannel], directory: Path, timing: Timing) -> Build:
    """Check every enabled channel on its own (its fields, where it sends now, amtool),
    then render the ones that pass."""
    template_path = Path(directory) / TEMPLATE_FILE
    amtool = amtool_path()
    good: list[NotificationChannel] = []
    errors: dict[int, str] = {}
    held: dict[int, str] = {}
    for channel in channels:
        if not channel.enabled:
            continue
        problems = channel_errors(channel, destinations=False)
        if problems:
            errors[channel.pk] = "; ".join(
                f"{name}: {' '.join(messages)}" for name, messages in problems.items()
            )
            continue
        why = held_back(channel)
        if why:
            held[channel.pk] = why
            continue
        alone = dump(render_config([channel], template_path, timing))
        error = check_config(alone, amtool)
        if error:
            errors[channel.pk] = scrub(error, [channel])
        else:
            good.append(channel)
    text = dump(render_config(good, template_path, timing))
    return Build(text, [channel.pk for channel in good], errors, held)


def write_file(path: Path, content: bytes, mode: int) -> bool:
    """Replace `path` atomically when its content differs; True when it was written."""
    path = Path(path)
    try:
        if path.read_bytes() == content:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, content, mode=mode)
    return True


def template_text() -> str:
    return render_templates(settings.PUBLIC_URL or "http://localhost:28080")
