"""The healthcheck app: probing, status changes, diagnosis, targets file, /health."""

from django.apps import AppConfig


class HealthcheckConfig(AppConfig):
    name = "healthcheck"
    verbose_name = "Health checks"

    def ready(self) -> None:
        # Load the configured Celery app in every Django process (API included), so
        # that `probe_fleet.delay()` goes to MAC's Redis broker, not Celery's default.
        # It lives here rather than in macweb/__init__.py because the agent-side `mac`
        # command imports macweb and must not need Celery or Django.
        import macweb.celery  # noqa: F401
