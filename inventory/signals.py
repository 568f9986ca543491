"""Signals the inventory sends once a change commits, for the apps above it.

The inventory cannot import the apps that react to its changes (the layers put
`alerting` above `inventory`), so it announces them instead: `alerting` connects a
receiver that turns maintenance into an Alertmanager silence. Sent only after the
transaction commits, so a change that rolls back never reaches anyone.
"""

from __future__ import annotations

from django.dispatch import Signal

# Nodes whose maintenance flag changed, or that left the inventory while in maintenance.
# Keyword argument: node_ids (list[int]); receivers read the nodes' current state.
maintenance_changed = Signal()
