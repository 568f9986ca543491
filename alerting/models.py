"""Where alerts go: the notification channels an admin sets up.

Each channel becomes one Alertmanager receiver and one route (alerting.amconfig).
Secrets (the SMTP password, webhook URLs that carry tokens) are stored here because
Alertmanager 0.25 reads them only from its configuration file; they are never shown
back by the admin or the API (alerting.secrets).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.db import models

from alerting.choices import ChannelKind, Severity
from alerting.destinations import destination, refusal

# One Alertmanager matcher: a label name, an operator, a value (quoted or not).
MATCHER = re.compile(
    r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|[^"\s]\S*)\s*$'
)
# Labels MAC itself uses for routing; a channel's filter may not use them.
RESERVED_LABELS = frozenset({"severity", "mac_test_channel", "mac_test_id"})
_URL = URLValidator(schemes=["http", "https"])
# What a person sets on a channel, in the order forms show it: the admin's form and
# the API's serializer both take these (the rest is the server's own bookkeeping).
CHANNEL_SETTINGS = (
    "name",
    "kind",
    "enabled",
    "severities",
    "matchers",
    "send_resolved",
    "url",
    "email_to",
    "smtp_host",
    "smtp_port",
    "smtp_user",
    "smtp_password",
    "smtp_from",
    "smtp_require_tls",
)
# The server's own bookkeeping on a channel: shown by the admin and the API, set by neither.
CHANNEL_RECORD = (
    "config_error",
    "pending_reason",
    "checked_at",
    "created_by",
    "created_at",
    "updated_at",
)


class NotificationChannel(models.Model):
    """One destination for alerts, with the alerts it wants (severity and label filters)."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=ChannelKind.choices)
    enabled = models.BooleanField(default=True)
    # Empty: every severity.
    severities = models.JSONField(default=list, blank=True)
    # Alertmanager matchers, all of which an alert must match: ['cluster_name="prod"'].
    matchers = models.JSONField(default=list, blank=True)
    send_resolved = models.BooleanField(default=True)
    # Email.
    email_to = models.CharField(max_length=1000, blank=True, default="")
    smtp_host = models.CharField(max_length=253, blank=True, default="")
    smtp_port = models.PositiveIntegerField(default=587)
    smtp_user = models.CharField(max_length=200, blank=True, default="")
    smtp_password = models.CharField(max_length=500, blank=True, default="")
    smtp_from = models.CharField(max_length=254, blank=True, default="")
    smtp_require_tls = models.BooleanField(default=True)
    # Webhook and Slack: the URL, which often is the secret itself.
    url = models.CharField(max_length=2000, blank=True, default="")
    # Why Alertmanager would refuse this channel; it is then left out of alertmanager.yml.
    config_error = models.TextField(blank=True, default="")
    # Why this channel, saved, is not in alertmanager.yml yet (the file could not be
    # written: a full disk); beat's poll retries until it is, then clears it.
    pending_reason = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        # Alertmanager through the front door (macweb.monitoring_gate): silences, posted
        # alerts, and its status page, which shows the channels' secrets.
        permissions = [
            (
                "manage_alertmanager",
                "Can silence and post alerts in Alertmanager and read its configuration",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def receiver_name(self) -> str:
        """Its receiver in alertmanager.yml (ids are stable, names may change)."""
        return f"mac-channel-{self.pk}"

    def email_addresses(self) -> list[str]:
        return [item.strip() for item in self.email_to.split(",") if item.strip()]

    def clean(self) -> None:
        errors = channel_errors(self)
        if errors:
            raise ValidationError(errors)


def matcher_error(text: str) -> str:
    """Why `text` is not a usable matcher ("" when it is)."""
    match = MATCHER.match(text)
    if not match:
        return f"{text!r} is not a matcher; write label=value, label!=value, label=~regex."
    if match.group(1) in RESERVED_LABELS:
        return f"{match.group(1)} is MAC's own label; use the severities field for severity."
    return ""


def url_problems(url: str) -> list[str]:
    """What Django's URLValidator lets through and the rest of MAC cannot take."""
    problems = []
    try:
        port = urlsplit(url).port
    except ValueError:  # urllib refuses a port above 65535 (Django's check does not)
        port = -1
    if port is not None and not 1 <= port <= 65535:
        problems.append("the port must be between 1 and 65535")
    # Go quotes a URL it refuses with %q: these characters would come back escaped in
    # amtool's complaint, where no copy of the URL matches it (secrets.scrub). No URL
    # needs them raw (RFC 3986): they are written %22, %5C, %01...
    if any(char in '"\\' or not char.isprintable() for char in url):
        problems.append(
            'must not contain ", \\ or control characters: percent-encode them (%22, %5C)'
        )
    return problems


def channel_errors(
    channel: NotificationChannel, *, destinations: bool = True
) -> dict[str, list[str]]:
    """{field: [message]} for what would make Alertmanager refuse the channel, and (with
    `destinations`) a host that does not resolve or names an address inside the master
    (alerting.destinations; the generation checks that apart, as a held-back channel)."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if channel.kind not in ChannelKind.values:
        add("kind", f"must be one of {', '.join(ChannelKind.values)}")
    if not isinstance(channel.severities, list) or not all(
        value in Severity.values for value in channel.severities
    ):
        add("severities", f"must be a list of {', '.join(Severity.values)}")
    if not isinstance(channel.matchers, list) or not all(
        isinstance(item, str) for item in channel.matchers
    ):
        add("matchers", 'must be a list of matchers such as cluster_name="prod"')
    else:
        for item in channel.matchers:
            if message := matcher_error(item):
                add("matchers", message)
    if channel.kind == ChannelKind.EMAIL:
        addresses = channel.email_addresses()
        if not addresses:
            add("email_to", "at least one address is required for an email channel")
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError:
                add("email_to", f"{address!r} is not an email address")
        if not channel.smtp_host:
            add("smtp_host", "the SMTP server is required for an email channel")
        elif not re.fullmatch(r"[A-Za-z0-9.\-:\[\]]+", channel.smtp_host):
            add("smtp_host", "must be a host name or an address, without a port")
        if not 1 <= (channel.smtp_port or 0) <= 65535:
            add("smtp_port", "must be between 1 and 65535")
        try:
            validate_email(channel.smtp_from)
        except ValidationError:
            add("smtp_from", "the sender address is required (e.g. mac@example.com)")
    elif channel.kind in (ChannelKind.WEBHOOK, ChannelKind.SLACK):
        if not channel.url:
            add("url", "the URL is required")
        else:
            try:
                _URL(channel.url)
            except ValidationError:
                add("url", "must be an http:// or https:// URL")
            else:
                for message in url_problems(channel.url):
                    add("url", message)
    where = destination(channel) if destinations else None
    if where and where.field not in errors and (why := refusal(where)):
        add(where.field, why)
    return errors
