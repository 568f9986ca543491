"""The inventory app: nodes, their events, registration and the nodes API."""

from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"
    verbose_name = "Inventory"
