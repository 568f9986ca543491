"""The alerting app: connects maintenance changes of the inventory to Alertmanager silences."""

from django.apps import AppConfig


class AlertingConfig(AppConfig):
    name = "alerting"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alerting import receivers  # noqa: F401  (connects the signal receivers)
