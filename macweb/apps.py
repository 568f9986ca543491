"""App config so that macweb's own templates and static files (dashboard) are found."""

from django.apps import AppConfig


class MacwebConfig(AppConfig):
    name = "macweb"
    verbose_name = "MAC"
