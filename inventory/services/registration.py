"""Registration and deregistration, with the rules of flow 2 of the contract:

- a registration matches an existing node by hostname, then by IP; it never creates
  a second row for one host, even when many arrive at once (unique constraints on
  hostname and ip, and a retry of the whole lookup when an insert loses the race);
- a node gets a random key at its first registration (only its sha256 is stored);
  re-registering a known hostname from another address, and deregistering, need it;
  a registration from the node's current address does not, and gets a fresh key when
  an admin has reset the old one;
- "from the node's address" means the request's real source address: an address
  claimed in the body (honoured with the join token) says where to probe, but anyone
  holding the cluster-wide join token can claim anything, so it proves nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from contract.master_api import REPORTED_FIELDS
from inventory.choices import EventKind, GpuVendor
from inventory.models import Node, NodeEvent
from inventory.services.changes import remove_node
from inventory.services.contention import unreachable
from inventory.services.events import push_on_commit, record_event
from inventory.services.keys import new_node_key, node_for_key, node_key_matches

log = logging.getLogger(__name__)

# Losing an insert race needs one retry; more means something else is wrong.
_MAX_ATTEMPTS = 5
# The advisory lock that queues the node counts of MAC_MAX_NODES (one number for the
# whole database: "MACNODES" read as a 64-bit integer).
NODE_COUNT_LOCK = int.from_bytes(b"MACNODES", "big")
AGENT_ACTOR = "agent"


class RegistrationError(Exception):
    """A registration or deregistration the rules refuse; `field` names what is at fault."""

    field = "non_field_errors"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        if field:
            self.field = field


class NodeKeyRequired(RegistrationError):
    """The request needs the node's key and did not present the right one (403)."""

    field = "node_key"


class NodeNotFound(RegistrationError):
    """No registered node holds the node key sent (deregistration: 404)."""

    field = "hostname"


class NodeLimitReached(RegistrationError):
    """The inventory holds MAX_NODES nodes already (429)."""


class AddressTaken(RegistrationError):
    """Another node already holds the address this node moves to (409)."""

    field = "ip"


@dataclass(frozen=True)
class Registration:
    """What an agent reports about itself, already validated (see api.serializers).

    Its fields are the contract's REGISTRATION_FIELDS, in order: the serializer's
    validated data builds it as it is.
    """

    hostname: str
    ip: str
    gpu_vendor: str = GpuVendor.NONE
    gpu_count: int = 0
    gpu_model: str = ""
    agent_network: str = ""
    nics: list = field(default_factory=list)
    exporters: dict = field(default_factory=dict)
    agent_version: str = ""
    machine_id: str = ""
    labels: dict = field(default_factory=dict)

    def reported(self) -> dict:
        """The fields a registration overwrites on the node (contract's REPORTED_FIELDS)."""
        return {name: getattr(self, name) for name in REPORTED_FIELDS}


@dataclass
class RegistrationResult:
    node: Node
    created: bool
    node_key: str | None = None  # the plain key, only when one was issued now
    events: list[str] = field(default_factory=list)
    # A new node's whole history (its 'registered' event), so that the response needs
    # no query for it; None for an existing node, whose history goes further back.
    history: list[NodeEvent] | None = None


def register_node(
    reg: Registration,
    *,
    source: str | None = None,
    node_key: str | None = None,
    actor: str = AGENT_ACTOR,
) -> RegistrationResult:
    """Create or update the node `reg` describes; see the module docstring for the rules.

    `source` is the address an HTTP request really came from (the API always passes
    it). Only a request from a node's own address re-registers it without its key: a
    claimed address (reg.ip, vouched for by the join token) says where to probe, it
    does not prove who is asking. In-process callers (commands, tests) leave it None,
    which stands for reg.ip. Raises NodeKeyRequired, NodeLimitReached or AddressTaken.
    """
    if source is None:
        source = reg.ip
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                result = _register_once(reg, source, node_key, actor)
                push_on_commit([result.node])
                return result
        except IntegrityError:
            # Another request inserted this hostname or ip between our lookup and our
            # insert; its row is committed now, so the next lookup finds it.
            log.info("registration of %s lost an insert race (attempt %d)", reg.hostname, attempt)
        except OperationalError as exc:
            # A deadlock (PostgreSQL) or a busy database (SQLite) under heavy
            # contention: the whole lookup is safe to repeat after a short pause.
            # A server that cannot be reached is no contention: fail at once (503).
            if attempt == _MAX_ATTEMPTS or unreachable(exc):
                raise
            time.sleep(0.02 * attempt)
    raise RegistrationError(
        f"could not register {reg.hostname}: it kept conflicting with concurrent "
        "registrations; retry in a few seconds."
    )


def _locked(**lookup) -> Node | None:
    return Node.objects.select_for_update().filter(**lookup).first()


def _register_once(
    reg: Registration, source: str, node_key: str | None, actor: str
) -> RegistrationResult:
    # One query finds (and locks) both candidates: the node with this hostname and the
    # one holding this address, the same row, two rows or none. No sort needed.
    candidates = (
        Node.objects.select_for_update().filter(Q(hostname=reg.hostname) | Q(ip=reg.ip)).order_by()
    )
    by_name, holder = None, None
    for node in candidates:
        if node.hostname == reg.hostname:
            by_name = node
        else:
            holder = node  # not the hostname's row, so it holds the address (unique)
    if by_name is not None:
        return _update_by_hostname(by_name, reg, source, node_key, actor, holder)
    if holder is not None:
        return _update_by_ip(holder, reg, source, node_key, actor)
    return _create(reg, actor)


def _create(reg: Registration, actor: str) -> RegistrationResult:
    key, key_hash = new_node_key()
    now = timezone.now()
    # Nothing was locked for a name or address nobody holds yet: a concurrent request
    # can insert the same one first. The unique constraint then refuses this insert
    # (IntegrityError), and register_node runs the whole lookup again.
    node = Node.objects.create(
        hostname=reg.hostname,
        ip=reg.ip,
        registered_at=now,
        status_changed_at=now,
        node_key_hash=key_hash,
        **reg.reported(),
    )
    # Over the cap, the insert is undone with the transaction.
    if _nodes_counted_in_turn(node) > settings.MAX_NODES:
        raise NodeLimitReached(
            f"the master holds its maximum of {settings.MAX_NODES} nodes (MAC_MAX_NODES); "
            "deregister unused nodes or raise the limit."
        )
    event = record_event(node, EventKind.REGISTERED, f"registered from {reg.ip}", actor=actor)
    return RegistrationResult(node, True, key, [EventKind.REGISTERED], history=[event])


def _nodes_counted_in_turn(new: Node) -> int:
    """The nodes, the new one included, counted by one new node's transaction at a time.

    On PostgreSQL each transaction sees committed rows and its own (READ COMMITTED): two
    first registrations at once would each count one node under the cap and both stay.
    A transaction-scoped advisory lock queues every new node's count, so the second
    counts after the first commits, its row included.

    SQLite has one writer at a time, so there ids are distinct and committed in turn:
    the table never holds more rows than its largest id, and while ids stay within the
    cap (a young inventory) the count, a query per new node, is skipped.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [NODE_COUNT_LOCK])
    elif new.pk <= settings.MAX_NODES:
        return new.pk
    return Node.objects.count()


def _update_by_hostname(
    node: Node,
    reg: Registration,
    source: str,
    node_key: str | None,
    actor: str,
    holder: Node | None,
) -> RegistrationResult:
    """`holder` is the other node that holds reg.ip, if any."""
    events: list[str] = []
    at_home = node.ip == reg.ip == source
    if not at_home and not node_key_matches(node, node_key):
        # Anything but the node calling from its own address could be a takeover.
        where = f"from {source}" + (f" on behalf of {reg.ip}" if reg.ip != source else "")
        raise NodeKeyRequired(
            f"{node.hostname} is registered at {node.ip}; re-registering it {where} needs "
            "its node key (X-MAC-Node-Key). If the key is lost, an admin can reset it "
            "(then register from the node's own address) or deregister the node."
        )
    if node.ip != reg.ip:
        if holder is not None:
            raise AddressTaken(
                f"{reg.ip} is registered to {holder.hostname}; deregister that node first."
            )
        old_ip = node.ip
        node.ip = reg.ip
        events.append(EventKind.IP_CHANGED)
        record_event(
            node,
            EventKind.IP_CHANGED,
            f"address changed from {old_ip} to {reg.ip}",
            actor=actor,
            data={"old": old_ip, "new": reg.ip},
        )
    return _refresh(node, reg, actor, events)


def _update_by_ip(
    node: Node, reg: Registration, source: str, node_key: str | None, actor: str
) -> RegistrationResult:
    # A renamed host calling from its own address proves it holds that address; from
    # anywhere else only the node's key does.
    keyed = node_key_matches(node, node_key)
    if source != node.ip and not keyed:
        raise AddressTaken(
            f"{reg.ip} is registered to {node.hostname}; deregister that node first, or "
            f"register from {reg.ip} itself (or with its node key) to rename it."
        )
    # ...unless it is another machine: hosts behind one NAT share the address they call
    # from, and each keyless registration would rename the one node to the last caller.
    if not keyed and node.machine_id and reg.machine_id and reg.machine_id != node.machine_id:
        raise AddressTaken(
            f"{reg.ip} is registered to {node.hostname}, another machine (its machine-id "
            f"differs); hosts that reach the master from one address (behind NAT) each "
            "need their own: give each agent a join token and MAC_AGENT_IP (its own "
            "address), or deregister the other node if this host replaced it."
        )
    old = node.hostname
    node.hostname = reg.hostname
    record_event(
        node,
        EventKind.HOSTNAME_CHANGED,
        f"hostname changed from {old} to {reg.hostname}",
        actor=actor,
        data={"old": old, "new": reg.hostname},
    )
    return _refresh(node, reg, actor, [EventKind.HOSTNAME_CHANGED])


def _refresh(node: Node, reg: Registration, actor: str, events: list[str]) -> RegistrationResult:
    for name, value in reg.reported().items():
        setattr(node, name, value)
    key = None
    if not node.node_key_hash:
        key, node.node_key_hash = new_node_key()
    node.save()
    events.append(EventKind.REREGISTERED)
    message = f"re-registered from {reg.ip}" + ("; new node key issued" if key else "")
    record_event(node, EventKind.REREGISTERED, message, actor=actor)
    return RegistrationResult(node, False, key, events)


def deregister_node(hostname: str, node_key: str | None, *, actor: str = AGENT_ACTOR) -> None:
    """Remove a node on its own request; the key is always needed. Events are kept.

    A refusal never says whether `hostname` is registered, so a caller cannot learn the
    inventory's names by trying them: a key that no node holds is NodeNotFound whatever
    the name, and another node's key is NodeKeyRequired whatever the name.
    """
    with transaction.atomic():
        node = _locked(hostname=hostname)
        if node is not None and node_key_matches(node, node_key):
            remove_node(node, actor=actor, message="deregistered by the agent")
            return
        holder = node_for_key(node_key)
        if holder is None:
            raise NodeNotFound(
                "no registered node holds this node key (the node was removed already, "
                "or an admin reset its key): nothing to deregister."
            )
        raise NodeKeyRequired(
            f"this node key is {holder.hostname}'s, and a node deregisters only itself; "
            f"an admin can remove {hostname} in the admin instead."
        )
