"""The healthcheck app: probing, status changes, diagnosis, targets file, /health."""

from django.apps import AppConfig


class HealthcheckConfig(AppConfig):
    name = "healthcheck"
    verbose_name = "Health checks"
