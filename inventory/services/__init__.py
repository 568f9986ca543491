"""The inventory's service layer: every change to a node goes through here, with its event.

Views, the admin and commands call these functions and do nothing else with nodes'
identity; the dedupe and key rules are written at the top of `registration`.

Modules: `keys` (per-node keys), `events` (events and the live push on commit),
`registration` (register and deregister), `changes` (what admins and operators do),
`health` (the GPU verdicts the sweep reads: judging, saving, and `node_verdicts()` for
the scheduler link).
This package is the only place, besides the sweep's batch, that pushes to the
dashboards: always through `events.push_on_commit`, so a change that rolls back
is never shown.
"""

from inventory.services.changes import (
    add_node_by_admin,
    edit_node_by_admin,
    forget_fault_rows,
    forget_gpu_faults,
    remove_node,
    remove_nodes,
    reset_node_key,
    reset_node_keys,
    set_maintenance,
    set_maintenance_of,
)
from inventory.services.events import record_event, record_ip_forward_reset
from inventory.services.health import node_verdicts
from inventory.services.keys import hash_node_key, new_node_key, node_for_key, node_key_matches
from inventory.services.registration import (
    AGENT_ACTOR,
    AddressTaken,
    NodeKeyRequired,
    NodeLimitReached,
    NodeNotFound,
    Registration,
    RegistrationError,
    RegistrationResult,
    deregister_node,
    register_node,
)

__all__ = [
    "AGENT_ACTOR",
    "AddressTaken",
    "NodeKeyRequired",
    "NodeLimitReached",
    "NodeNotFound",
    "Registration",
    "RegistrationError",
    "RegistrationResult",
    "add_node_by_admin",
    "deregister_node",
    "edit_node_by_admin",
    "forget_fault_rows",
    "forget_gpu_faults",
    "hash_node_key",
    "new_node_key",
    "node_for_key",
    "node_key_matches",
    "node_verdicts",
    "record_event",
    "record_ip_forward_reset",
    "register_node",
    "remove_node",
    "remove_nodes",
    "reset_node_key",
    "reset_node_keys",
    "set_maintenance",
    "set_maintenance_of",
]
