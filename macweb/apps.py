"""App config so that macweb's own templates, static files and commands are found."""

from django.apps import AppConfig


class MacwebConfig(AppConfig):
    name = "macweb"
    verbose_name = "MAC"

    def ready(self) -> None:
        from macweb import checks  # noqa: F401  (registers the system checks)
