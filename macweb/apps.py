"""App config so that macweb's own templates, static files and commands are found."""

from django.apps import AppConfig


class MacwebConfig(AppConfig):
    name = "macweb"
    verbose_name = "MAC"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from macweb import checks  # noqa: F401  (registers the system checks)
        from macweb.db_deadline import install_deadline

        # Every process of the master (API, worker, beat, commands): a hung database
        # fails a statement within seconds instead of holding it (macweb.db_deadline).
        connection_created.connect(install_deadline, dispatch_uid="mac-db-deadline")
