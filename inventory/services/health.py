"""The GPU verdicts on the master: from what the sweep read to the node's row and history.

The sweep reads each GPU node's verdict answers (healthcheck.verdicts) and hands them
here as ``Observation``s; ``judge_health`` decides, ``save_health`` writes inside the
sweep's fenced transaction. Costs at 10,000 nodes: an answer whose fingerprint did not
change since the last sweep is neither parsed nor written (only the node's streak grows,
one ``UPDATE ... WHERE id IN (...)`` per 5,000 nodes); the GPU rows, the fault history
and the boot last seen are read for the few nodes whose answer changed.

What a node's verdict is (docs/gpu-health.md):

- each GPU's verdict as its exporter judged it (node.gpu.health), plus two judgements
  only the master can make:
  - **missing**: the inventory (the registration's ``gpu_count``) has more GPUs than the
    exporter reports: each GPU left out is unhealthy, reboot, named by its identity (the
    GPUs a reboot leaves are numbered anew: the index it had may be another's now);
  - **repeat**: a fault that a reset or a reboot should cure (its action is reset_gpu or
    reboot), seen on the same GPU (serial, else UUID) in more boots than
    MAC_GPU_FAULT_REBOOTS allows within MAC_GPU_FAULT_DAYS, is escalated to
    inspect_hardware. The history (GpuFault) is kept by the GPU, not the node, so it
    survives the node's re-registration;
- the node's state and action are the worst of its GPUs'; its evidence is the most severe
  item in one line (contract.verdicts.verdict_line), since when the state holds, and the
  streak: consecutive sweeps of the node's current boot that read the verdict and found
  the state unchanged (a node whose GPU exporter did not answer keeps its verdict and its
  streak; a new boot starts it again at 1, so the drain's resume waits for sweeps of the
  new boot, and a boot not reported restarts nothing). Each GPU's ``since`` follows the
  GPU: another GPU at its index (UUID, else serial) starts anew.

Every change of state, action or evidence line is a NodeEvent (health_*). The drain of
the scheduler link reads ``node_verdicts()`` after each sweep.
"""

from __future__ import annotations

import re
import secrets
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F

from contract.verdicts import (
    Evidence,
    EvidenceSource,
    GpuVerdict,
    HealthAction,
    HealthState,
    ReportedHealth,
    parse_verdicts,
    ranked,
    verdict_line,
    worst_action,
    worst_state,
)
from inventory.choices import EventKind
from inventory.models import GpuFault, GpuHealth, Node, NodeEvent

ID_CHUNK = 5000
QUIET_BATCH = 1000
ACTOR = "probe"
# Faults a reset or a reboot should cure: the ones whose return after a reboot escalates.
_GPU_INDEX = re.compile(r"[0-9]{1,4}")
CURABLE = frozenset({HealthAction.RESET_GPU, HealthAction.REBOOT})
EVENT_KINDS = {
    HealthState.HEALTHY: EventKind.HEALTH_HEALTHY,
    HealthState.DEGRADED: EventKind.HEALTH_DEGRADED,
    HealthState.UNHEALTHY: EventKind.HEALTH_UNHEALTHY,
}


@dataclass
class Observation:
    """What one sweep read of one node's GPU verdicts."""

    node_id: int
    observed: bool  # the verdict was read (changed or not); False keeps the last one
    digest: str = ""
    # (vendor, body, cut) of each GPU exporter, only when the digest changed.
    answers: list[tuple[str, bytes, bool]] = field(default_factory=list)


@dataclass
class HealthChanges:
    """What judge_health decided; save_health writes it."""

    streak_ids: list[int] = field(default_factory=list)  # observed, verdict unchanged
    nodes: dict[int, dict] = field(default_factory=dict)  # node id -> fields to write
    gpus: dict[int, list[GpuVerdict]] = field(default_factory=dict)  # node -> every GPU
    events: list[NodeEvent] = field(default_factory=list)
    # (GPU serial or UUID, fault key, boot id, node id, the exporter's GPU index, words)
    faults: list[tuple[str, str, str, int, int, str]] = field(default_factory=list)
    # node id -> the fingerprint its row had when judged (see drop_overtaken)
    judged_from: dict[int, str] = field(default_factory=dict)

    @property
    def changed_ids(self) -> list[int]:
        """Nodes whose verdict (state, action or evidence line) changed."""
        return [node_id for node_id, values in self.nodes.items() if "health_state" in values]

    @property
    def written_ids(self) -> list[int]:
        """Nodes whose row this sweep writes beyond the streak (a new answer, read for the
        first time or changed): the dashboards see them again."""
        return list(self.nodes)


def judge_health(
    rows: list[dict], observations: dict[int, Observation], now: datetime
) -> HealthChanges:
    """Decide every node's verdict from this sweep's observations; nothing is written."""
    changes = HealthChanges()
    fresh: dict[int, list[ReportedHealth]] = {}
    by_id = {row["id"]: row for row in rows}
    for node_id, seen in observations.items():
        row = by_id.get(node_id)
        if row is None or not seen.observed:
            continue
        if seen.digest == row.get("health_digest") or not seen.answers:
            changes.streak_ids.append(node_id)
            continue
        reports = [parse_verdicts(body, vendor, cut) for vendor, body, cut in seen.answers]
        if any(report is None for report in reports):
            continue  # no verdict in an answer after all: keep the last one
        fresh[node_id] = [report for report in reports if report is not None]
        changes.nodes[node_id] = {"health_digest": seen.digest}
        changes.judged_from[node_id] = row.get("health_digest") or ""
    if fresh:
        _judge_changed(changes, by_id, fresh, now)
    return changes


def _judge_changed(
    changes: HealthChanges, rows: dict[int, dict], fresh: dict[int, list], now: datetime
) -> None:
    known = _known_gpus(list(fresh))
    stored = _stored_boots(list(fresh))
    verdicts: dict[int, list[GpuVerdict]] = {}
    boots: dict[int, str] = {}
    for node_id, reports in fresh.items():
        boots[node_id] = next((report.boot_id for report in reports if report.boot_id), "")
        verdicts[node_id] = _with_missing(rows[node_id], reports, known.get(node_id, {}), now)
    _escalate(changes, verdicts, boots, now)
    for node_id, gpus in verdicts.items():
        row = rows[node_id]
        changes.gpus[node_id] = gpus
        values = changes.nodes[node_id]
        values["boot_id"] = boots[node_id]
        # The streak counts sweeps on this boot: the drain resumes a node after so many
        # healthy sweeps, and the old boot's must not stand for the new one's. A boot not
        # reported (or not known before) says nothing of a reboot.
        was, boot = stored.get(node_id, ""), boots[node_id]
        values["health_streak"] = 1 if was and boot and was != boot else F("health_streak") + 1
        evidence = [item for gpu in gpus for item in gpu.evidence]
        state = worst_state(gpu.state for gpu in gpus)
        action = worst_action(gpu.action for gpu in gpus)
        line = verdict_line(evidence)[:500]
        if (state, action, line) == (
            row["health_state"], row["health_action"], row["health_evidence"]
        ):  # fmt: skip
            continue
        values.update(health_state=state, health_action=action, health_evidence=line)
        if state != row["health_state"]:
            values.update(health_since=now, health_streak=1)
        changes.events.append(_event(row, state, action, line, gpus, now))


def _stored_boots(node_ids: list[int]) -> dict[int, str]:
    """The boot each node's row has now (the sweep's rows leave it out: few nodes need it)."""
    boots: dict[int, str] = {}
    for start in range(0, len(node_ids), ID_CHUNK):
        chunk = node_ids[start : start + ID_CHUNK]
        boots.update(Node.objects.filter(id__in=chunk).values_list("id", "boot_id"))
    return boots


def _known_gpus(node_ids: list[int]) -> dict[int, dict[int, GpuHealth]]:
    known: dict[int, dict[int, GpuHealth]] = defaultdict(dict)
    for start in range(0, len(node_ids), ID_CHUNK):
        for gpu in GpuHealth.objects.filter(node_id__in=node_ids[start : start + ID_CHUNK]):
            known[gpu.node_id][gpu.index] = gpu
    return known


def _with_missing(
    row: dict, reports: list[ReportedHealth], known: dict[int, GpuHealth], now: datetime
) -> list[GpuVerdict]:
    """Every GPU the exporters reported, plus one verdict per inventory GPU they left out."""
    gpus: dict[int, GpuVerdict] = {}
    for report in reports:
        for gpu in report.gpus:
            # ASCII digits, as many as a GPU index has: "²".isdigit() holds (int() refuses
            # it) and a 12-digit index would not fit the GpuHealth row.
            if _GPU_INDEX.fullmatch(gpu.index):
                gpus[int(gpu.index)] = gpu
    complete = all(report.complete for report in reports)
    expected = row.get("gpu_count") or 0
    if not complete or len(gpus) >= expected:
        return [gpus[index] for index in sorted(gpus)]
    count = expected - len(gpus)
    # The indexes the exporters leave free, as many as GPUs are missing: after a reboot NVML
    # numbers the GPUs left from 0 again, so a missing GPU's own index may be another's now.
    free = [i for i in range(max(expected, max(gpus, default=0) + 1)) if i not in gpus][:count]
    gone, unknown = _missing_gpus(gpus, known, count)
    slots = {seen.index: seen for seen in gone if seen.index in free}
    rest = iter(i for i in free if i not in slots)
    slots |= {next(rest): seen for seen in gone if seen.index not in slots}
    reported = {gpu.minor for gpu in gpus.values()}
    words = f"missing: the exporter reports {len(gpus)} of the {expected} GPUs registered"
    for index in free:
        seen = slots.get(index)
        at = _missing_since(seen or known.get(index)) or now.timestamp()
        uuid, serial = (seen.uuid, seen.serial) if seen else ("", "")
        # its minor too: Slurm still counts its device file among the node's GPUs (not
        # where a GPU reported now has it: the driver numbered the GPUs left anew)
        minor = seen.minor if seen and seen.minor not in reported else None
        item = Evidence(
            EvidenceSource.MISSING,
            "missing",
            words if seen else f"{words}; MAC cannot tell which: {unknown}",
            HealthState.UNHEALTHY,
            HealthAction.REBOOT,
            at,
            str(index),
            uuid,
            serial,
        )
        gpus[index] = GpuVerdict(
            str(index), uuid, serial, row.get("gpu_vendor", ""), (item,), minor
        )
    return [gpus[index] for index in sorted(gpus)]


def _missing_gpus(
    gpus: dict[int, GpuVerdict], known: dict[int, GpuHealth], count: int
) -> tuple[list[GpuHealth], str]:
    """The rows of the known GPUs that the exporters left out, by identity (UUID, else
    serial), at most ``count``; and why the others cannot be named.

    Not by index: after a reboot NVML numbers the GPUs left anew, so the index a GPU had
    may be another's now (so may its device file's minor number). Named only where the
    answer tells: every GPU reported carries the identity, and none of them is new to MAC
    (a new one may have replaced a GPU not reported, which then has left the node, not gone
    missing). Partitions of one GPU (AMD's CPX mode) share its identity: each counts.
    """
    name = next((n for n in ("uuid", "serial") if all(getattr(g, n) for g in gpus.values())), "")
    if not name:
        return [], "the exporter does not name every GPU by UUID or serial"
    rows = [gpu for _, gpu in sorted(known.items()) if getattr(gpu, name)]
    reported = Counter(getattr(gpu, name) for gpu in gpus.values())
    absent = Counter(getattr(gpu, name) for gpu in rows) - reported
    if not absent:
        return [], "every GPU MAC knew is reported"
    if reported - Counter(getattr(gpu, name) for gpu in rows):
        return [], "a GPU new to MAC is reported, maybe in its place"
    if absent.total() > count:
        return [], f"{absent.total()} GPUs MAC knew are not reported"
    gone = []
    for gpu in sorted(rows, key=lambda gpu: gpu.index in gpus):  # the one at a free index
        if absent[getattr(gpu, name)] > 0:
            absent[getattr(gpu, name)] -= 1
            gone.append(gpu)
    return sorted(gone, key=lambda gpu: gpu.index), "every other GPU MAC knew is reported"


def _missing_since(gpu: GpuHealth | None) -> float:
    """When a GPU was first found missing, so that its evidence keeps one time."""
    for item in (gpu.evidence if gpu else []) or []:
        if item.get("source") == EvidenceSource.MISSING:
            return float(item.get("at") or 0.0)
    return 0.0


def _escalate(
    changes: HealthChanges,
    verdicts: dict[int, list[GpuVerdict]],
    boots: dict[int, str],
    now: datetime,
) -> None:
    """Record this boot's curable faults; escalate those seen in too many boots."""
    curable = [
        (node_id, index, gpu, item)
        for node_id, gpus in verdicts.items()
        if boots[node_id]
        for index, gpu in enumerate(gpus)
        if gpu.identity
        for item in gpu.evidence
        if item.action in CURABLE
    ]
    if not curable:
        return
    since = now - timedelta(days=settings.GPU_FAULT_DAYS)
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    identities = sorted({gpu.identity for _, _, gpu, _ in curable})
    history = GpuFault.objects.filter(gpu__in=identities, last_seen__gte=since)
    for gpu_key, fault, boot_id in history.values_list("gpu", "fault", "boot_id"):
        seen[(gpu_key, fault)].add(boot_id)
    repeats: dict[tuple[int, int], list[Evidence]] = defaultdict(list)
    for node_id, index, gpu, item in curable:
        boots_seen = seen[(gpu.identity, item.fault_key)] | {boots[node_id]}
        # the exporter's index (as _save_gpus keeps it), not the position in the list
        changes.faults.append(
            (gpu.identity, item.fault_key, boots[node_id], node_id, int(gpu.index), item.detail)
        )
        if len(boots_seen) - 1 >= settings.GPU_FAULT_REBOOTS:
            reboots = len(boots_seen) - 1
            words = f"{item.detail}, back after {reboots} reboot(s)"
            repeats[(node_id, index)].append(
                Evidence(
                    EvidenceSource.REPEAT,
                    item.fault_key,
                    words,
                    HealthState.UNHEALTHY,
                    HealthAction.INSPECT_HARDWARE,
                    item.at,
                    gpu.index,
                    gpu.uuid,
                    gpu.serial,
                )
            )
    for (node_id, index), extra in repeats.items():
        gpu = verdicts[node_id][index]
        verdicts[node_id][index] = replace(gpu, evidence=tuple(ranked([*extra, *gpu.evidence])))


def _event(row: dict, state, action, line: str, gpus: list[GpuVerdict], now: datetime) -> NodeEvent:
    state, action = HealthState(state), HealthAction(action)
    message = f"GPU verdict {state}: {line}" if line else f"GPU verdict {state}"
    return NodeEvent(
        node_id=row["id"],
        hostname=row["hostname"],
        kind=EVENT_KINDS[state],
        message=message[:500],
        data={
            "state": str(state),
            "action": str(action),
            "previous": {"state": row["health_state"], "action": row["health_action"]},
            "gpus": [
                {
                    "index": gpu.index,
                    "uuid": gpu.uuid,
                    "serial": gpu.serial,
                    "state": str(gpu.state),
                    "action": str(gpu.action),
                    "evidence": [e.words() for e in gpu.evidence],
                    # whole, so a job's report finds it after the verdict has cleared
                    "found": [e.as_dict() for e in gpu.evidence],
                }
                for gpu in gpus
                if gpu.evidence
            ],
        },
        actor=ACTOR,
        created_at=now,
    )


def drop_overtaken(changes: HealthChanges, digests: dict[int, str]) -> set[int]:
    """Leave out the nodes whose row changed fingerprint since they were judged.

    ``digests`` are the rows' fingerprints now, read under their row locks inside the
    sweep's transaction. A different one means another writer came between the judgement
    and this write: a fault-history forget (forget_gpu_faults) that the judgement, made
    from the history before it, would undo by writing the old escalation back with a
    fingerprint that stops the next sweeps from judging again; or a retried sweep chunk
    that already wrote this very change and its event. Those nodes are written by
    nobody now, and the next sweep judges them afresh. Returns their ids.
    """
    overtaken = {
        node_id
        for node_id, digest in changes.judged_from.items()
        if node_id in changes.nodes and digests.get(node_id, digest) != digest
    }
    if overtaken:
        for node_id in overtaken:
            changes.nodes.pop(node_id, None)
            changes.gpus.pop(node_id, None)
        changes.faults = [fault for fault in changes.faults if fault[3] not in overtaken]
        changes.events = [event for event in changes.events if event.node_id not in overtaken]
    return overtaken


def forgotten_mark() -> str:
    """A fingerprint no answer has: written where fault history is forgotten, so that
    the next sweep judges the node afresh and a sweep judged before the forget sees its
    row overtaken (drop_overtaken), even where the row had no fingerprint yet."""
    return f"forgotten:{secrets.token_hex(8)}"


def save_health(changes: HealthChanges, now: datetime) -> None:
    """Write the decided changes; call inside the sweep's transaction.

    ``streak_ids`` are left to the caller: the sweep adds them to its last_seen update.
    """
    alive = set(Node.objects.filter(id__in=list(changes.nodes)).values_list("id", flat=True))
    quiet = []  # a new answer, the same verdict: the fingerprint, the boot, the streak move
    for node_id, values in changes.nodes.items():
        if node_id not in alive:
            continue
        if "health_state" in values:
            Node.objects.filter(id=node_id).update(**values)
        else:
            quiet.append(Node(id=node_id, health_digest=values["health_digest"],
                              boot_id=values["boot_id"],
                              health_streak=values["health_streak"]))  # fmt: skip
    # The first sweep after an upgrade, or after a fleet-wide reboot, has 10,000 of these:
    # one bulk UPDATE per QUIET_BATCH nodes, not one per node (docs/probing.md). The streak
    # is one more, or 1 on a new boot, in the same statement (an expression per node).
    Node.objects.bulk_update(
        quiet, ["health_digest", "boot_id", "health_streak"], batch_size=QUIET_BATCH
    )
    _save_gpus({k: v for k, v in changes.gpus.items() if k in alive}, now)
    _save_faults([f for f in changes.faults if f[3] in alive], now)
    events = [event for event in changes.events if event.node_id in alive]
    NodeEvent.objects.bulk_create(events, batch_size=1000)


def _save_gpus(gpus: dict[int, list[GpuVerdict]], now: datetime) -> None:
    if not gpus:
        return
    known = _known_gpus(list(gpus))
    create, update, keep = [], [], defaultdict(set)
    for node_id, verdicts in gpus.items():
        for verdict in verdicts:
            index = int(verdict.index)
            keep[node_id].add(index)
            evidence = [item.as_dict() for item in verdict.evidence]
            row = known.get(node_id, {}).get(index)
            if row is None:
                create.append(
                    GpuHealth(
                        node_id=node_id,
                        index=index,
                        uuid=verdict.uuid,
                        serial=verdict.serial,
                        minor=verdict.minor,
                        vendor=verdict.vendor or "none",
                        state=verdict.state,
                        action=verdict.action,
                        evidence=evidence,
                        since=now,
                        updated=now,
                    )
                )
                continue
            fields = (verdict.uuid, verdict.serial, str(verdict.state), str(verdict.action))
            same = fields == (row.uuid, row.serial, row.state, row.action)
            if same and row.evidence == evidence and row.minor == verdict.minor:
                continue
            if row.state != verdict.state or _another_gpu(row, verdict):
                row.since = now
            row.uuid, row.serial, row.state, row.action = fields
            row.evidence, row.updated, row.minor = evidence, now, verdict.minor
            if verdict.vendor:
                row.vendor = verdict.vendor
            update.append(row)
    GpuHealth.objects.bulk_create(create, batch_size=1000)
    GpuHealth.objects.bulk_update(
        update,
        ["uuid", "serial", "minor", "vendor", "state", "action", "evidence", "since", "updated"],
        batch_size=500,
    )
    for node_id, rows in known.items():
        gone = [index for index in rows if index not in keep[node_id]]
        if gone:
            GpuHealth.objects.filter(node_id=node_id, index__in=gone).delete()


def _another_gpu(row: GpuHealth, verdict: GpuVerdict) -> bool:
    """Whether the GPU at the row's index is another one now (a board swapped, the GPUs
    numbered anew): its UUID, else where either side has none its serial, differs. Its
    state then holds since now, not since the one before it had that state."""
    if row.uuid and verdict.uuid:
        return row.uuid != verdict.uuid
    return bool(row.serial and verdict.serial and row.serial != verdict.serial)


def _save_faults(faults: list[tuple[str, str, str, int, int, str]], now: datetime) -> None:
    if not faults:
        return
    hostnames = dict(
        Node.objects.filter(id__in={f[3] for f in faults}).values_list("id", "hostname")
    )
    rows = [
        GpuFault(
            gpu=gpu, fault=fault, boot_id=boot_id, node_id=node_id, hostname=hostnames[node_id],
            gpu_index=index, detail=detail[:300], first_seen=now, last_seen=now,
        )
        for gpu, fault, boot_id, node_id, index, detail in faults
    ]  # fmt: skip
    GpuFault.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["gpu", "fault", "boot_id"],
        update_fields=["last_seen", "node", "hostname", "gpu_index", "detail"],
    )


def node_verdicts(ids: list[int] | None = None) -> list[dict]:
    """Every node's verdict (or these nodes'), for the scheduler link after each sweep.

    [{"id", "hostname", "state", "action", "evidence", "since", "streak",
      "maintenance", "boot_id"}, ...] in id order; ``state`` and ``action`` are
    contract.verdicts.HealthState and HealthAction values; ``boot_id`` the boot the
    verdict was read from (the drain reboots a node at most once per boot).
    """
    nodes = Node.objects.order_by("id")
    if ids is not None:
        nodes = nodes.filter(id__in=ids)
    return [
        {
            "id": row["id"],
            "hostname": row["hostname"],
            "state": HealthState(row["health_state"]),
            "action": HealthAction(row["health_action"]),
            "evidence": row["health_evidence"],
            "since": row["health_since"],
            "streak": row["health_streak"],
            "maintenance": row["maintenance"],
            "boot_id": row["boot_id"],
        }
        for row in nodes.values(
            "id", "hostname", "health_state", "health_action", "health_evidence", "health_since",
            "health_streak", "maintenance", "boot_id",
        ).iterator(chunk_size=ID_CHUNK)
    ]  # fmt: skip
