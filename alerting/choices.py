"""Kinds of notification channel and the severities MAC's rules use."""

from django.db import models


class ChannelKind(models.TextChoices):
    EMAIL = "email", "Email over SMTP"
    WEBHOOK = "webhook", "Webhook (Alertmanager's JSON)"
    SLACK = "slack", "Slack-compatible incoming webhook"


class Severity(models.TextChoices):
    """The `severity` label of MAC's alert rules (scraping/prometheus/alerts.yml)."""

    CRITICAL = "critical", "critical"
    WARNING = "warning", "warning"
    INFO = "info", "info"
