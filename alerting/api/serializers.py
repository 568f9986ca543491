"""The channel as the API shows and takes it: secrets write-only, checked as Alertmanager would."""

from __future__ import annotations

from rest_framework import serializers

from alerting.choices import Severity
from alerting.models import CHANNEL_RECORD, CHANNEL_SETTINGS, NotificationChannel, channel_errors
from alerting.secrets import keep_if_empty, url_hint

SECRETS = ("url", "smtp_password")


class NotificationChannelSerializer(serializers.ModelSerializer):
    """A notification channel. `url` and `smtp_password` are write-only: a GET shows
    `url_hint` and `has_smtp_password` instead, and an empty value on update keeps the
    stored secret."""

    severities = serializers.ListField(
        child=serializers.ChoiceField(choices=Severity.choices), required=False
    )
    matchers = serializers.ListField(
        child=serializers.CharField(max_length=500), required=False, max_length=50
    )
    url = serializers.CharField(
        write_only=True, required=False, allow_blank=True, max_length=2000,
        help_text="Webhook or Slack URL; write-only.",
    )  # fmt: skip
    smtp_password = serializers.CharField(
        write_only=True, required=False, allow_blank=True, max_length=500,
        help_text="Write-only; empty on update keeps the stored one.",
    )  # fmt: skip
    url_hint = serializers.SerializerMethodField()
    has_smtp_password = serializers.SerializerMethodField()

    class Meta:
        model = NotificationChannel
        fields = [
            "id",
            *CHANNEL_SETTINGS,
            "url_hint",
            "has_smtp_password",
            *CHANNEL_RECORD,
        ]
        read_only_fields = list(CHANNEL_RECORD)

    def get_url_hint(self, channel: NotificationChannel) -> str:
        return url_hint(channel.url)

    def get_has_smtp_password(self, channel: NotificationChannel) -> bool:
        return bool(channel.smtp_password)

    def validate(self, attrs: dict) -> dict:
        current = self.instance
        for name in SECRETS:
            if name in attrs and current is not None:
                attrs[name] = keep_if_empty(attrs[name], getattr(current, name))
        probe = NotificationChannel(
            **{
                field.name: attrs.get(field.name, getattr(current, field.name, field.get_default()))
                for field in NotificationChannel._meta.concrete_fields
                if field.name not in {"id", "created_at", "updated_at"}
            }
        )
        errors = channel_errors(probe)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs
