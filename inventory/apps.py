"""The inventory app: nodes, their events, registration and the nodes API."""

from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"

    def ready(self) -> None:
        from inventory import checks  # noqa: F401  (registers the system checks)
