"""The channel form of the admin: secrets write-only, filters as people write them."""

from __future__ import annotations

from django import forms

from alerting.choices import Severity
from alerting.models import CHANNEL_SETTINGS, NotificationChannel, channel_errors
from alerting.secrets import keep_if_empty, url_hint

WRITE_ONLY_HELP = "Write-only: never shown again. Leave empty to keep the stored one."


class SecretField(forms.CharField):
    """A password-style input that never renders the stored value."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("strip", True)
        super().__init__(widget=forms.PasswordInput(render_value=False), **kwargs)


class NotificationChannelForm(forms.ModelForm):
    severities = forms.MultipleChoiceField(
        choices=Severity.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Alerts of these severities only; none ticked means every severity.",
    )
    matchers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": 'cluster_name="prod"'}),
        help_text="Alertmanager matchers, one per line, all of which must hold: "
        'cluster_name="prod", hostname=~"gpu-.*", gpu_vendor!="amd".',
    )
    url = SecretField(label="URL", max_length=2000, help_text=WRITE_ONLY_HELP)
    smtp_password = SecretField(label="SMTP password", max_length=500, help_text=WRITE_ONLY_HELP)
    forget_smtp_password = forms.BooleanField(
        required=False, help_text="Tick to remove the stored SMTP password."
    )

    class Meta:
        model = NotificationChannel
        fields = CHANNEL_SETTINGS
        help_texts = {
            "email_to": "Comma-separated addresses.",
            "smtp_require_tls": (
                "Require STARTTLS before sending. Not asked on port 465, which is TLS from "
                "the start (SMTPS)."
            ),
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        channel = self.instance
        self.initial["matchers"] = "\n".join(channel.matchers or [])
        if channel.url:
            self.fields["url"].widget.attrs["placeholder"] = f"set: {url_hint(channel.url)}"
        if channel.smtp_password:
            self.fields["smtp_password"].widget.attrs["placeholder"] = "set (hidden)"

    def clean_matchers(self) -> list[str]:
        text = self.cleaned_data.get("matchers") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean(self) -> dict:
        data = super().clean()
        stored = NotificationChannel.objects.filter(pk=self.instance.pk).first()
        old_url = stored.url if stored else ""
        old_password = stored.smtp_password if stored else ""
        data["url"] = keep_if_empty(data.get("url"), old_url)
        data["smtp_password"] = (
            ""
            if data.get("forget_smtp_password")
            else keep_if_empty(data.get("smtp_password"), old_password)
        )
        model_fields = {field.name for field in NotificationChannel._meta.concrete_fields}
        probe = NotificationChannel(
            **{name: value for name, value in data.items() if name in model_fields}
        )
        for field, messages in channel_errors(probe).items():
            if field in self.fields and field not in self.errors:
                for message in messages:
                    self.add_error(field, message)
        return data
