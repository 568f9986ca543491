"""Django admin for notification channels: edit, test, and see why one is left out.

Saving or deleting goes through alerting.services, which rewrites alertmanager.yml and
reloads Alertmanager at once; the admin then says whether the channel is in use.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from alerting import services
from alerting.forms import NotificationChannelForm
from alerting.models import CHANNEL_RECORD, NotificationChannel
from alerting.secrets import url_hint


def _actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


def _tell(request: HttpRequest, applied: services.Applied) -> None:
    for good, sentence in services.describe_applied(applied):
        messages.add_message(request, messages.SUCCESS if good else messages.WARNING, sentence)


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = NotificationChannelForm
    list_display = ("name", "kind", "enabled", "filters", "destination", "in_use", "checked_at")
    list_filter = ("kind", "enabled")
    search_fields = ("name", "email_to")
    actions = ("send_test_notification",)
    readonly_fields = CHANNEL_RECORD
    fieldsets = (
        (None, {"fields": ("name", "kind", "enabled", "send_resolved")}),
        ("Which alerts", {"fields": ("severities", "matchers")}),
        ("Webhook or Slack", {"fields": ("url",)}),
        (
            "Email",
            {
                "fields": (
                    "email_to",
                    "smtp_host",
                    "smtp_port",
                    "smtp_require_tls",
                    "smtp_from",
                    "smtp_user",
                    "smtp_password",
                    "forget_smtp_password",
                )
            },
        ),
        (
            "State",
            {"fields": ("config_error", "checked_at", "created_by", "created_at", "updated_at")},
        ),
    )

    @admin.display(description="filters")
    def filters(self, channel: NotificationChannel) -> str:
        parts = [f"severity: {', '.join(channel.severities)}"] if channel.severities else []
        parts.extend(channel.matchers)
        return "; ".join(parts) or "every alert"

    @admin.display(description="to")
    def destination(self, channel: NotificationChannel) -> str:
        return channel.email_to if channel.kind == "email" else url_hint(channel.url)

    @admin.display(description="in use", boolean=False)
    def in_use(self, channel: NotificationChannel) -> str:
        if not channel.enabled:
            return "disabled"
        if channel.config_error:
            return f"left out: {channel.config_error}"
        if channel.pending_reason:
            return f"pending: {channel.pending_reason}"
        return "yes" if channel.checked_at else "not checked yet"

    def save_model(self, request, obj, form, change) -> None:
        _tell(request, services.save_channel(obj, actor=_actor(request)))

    def delete_model(self, request, obj) -> None:
        _tell(request, services.delete_channels([obj]))

    def delete_queryset(self, request, queryset: QuerySet) -> None:
        _tell(request, services.delete_channels(list(queryset)))

    @admin.action(description="Send a test notification (through Alertmanager)")
    def send_test_notification(self, request: HttpRequest, queryset: QuerySet) -> None:
        for channel in queryset:
            try:
                sent = services.send_test_notification(channel, actor=_actor(request))
            except services.ChannelError as exc:
                self.message_user(request, f"{channel.name}: {exc}", messages.ERROR)
            else:
                self.message_user(request, sent[:1].upper() + sent[1:] + ".", messages.SUCCESS)
