"""The healthcheck app: probing, status changes, diagnosis, /health and /metrics."""

from django.apps import AppConfig


class HealthcheckConfig(AppConfig):
    name = "healthcheck"
    verbose_name = "Health checks"
