"""What MAC reads from Slurm, as plain records, and the pure functions that parse the tools.

Sources, read from 22.05 to 24.11 (tests/fixtures/slurm/ holds each release's real
outputs, and its README how they were captured):
- nodes: one record per node (base state, state flags, reason, who set it). 22.05 has
  that as `sinfo --json` only; from 23.02 on sinfo prints `{"sinfo": [...]}`, groups of
  nodes that share a partition and a state (not a reason), and the per-node record is
  `scontrol --json show nodes` (which 22.05 lacks): `SlurmClient` asks `scontrol
  --version` which one to run, and `parse_nodes` reads either's `{"nodes": [...]}`;
- jobs: `squeue --json`, which holds every job slurmctld still remembers: pending,
  running, and finished ones for MinJobAge (300 s by default; from 24.05.1 on only with
  `--states=all`); while a job runs, its `gres_detail` gives each node's GPU indexes
  (`gpu:2(IDX:0-1)`), one entry per node of its allocation, in that order;
- accounting: `sacct` (slurmdbd), which keeps finished jobs for good but knows only how
  many GPUs a job had (`AllocTRES gres/gpu=N`), not which; read as delimited text
  (`parse_sacct` says why not --json);
- reservations: `scontrol show reservation -o` (22.05's scontrol has no --json, and
  24.11's JSON does not say whether a reservation is active);
- the controller: `scontrol ping`.

The JSON of 22.05 (openapi/v0.0.38) writes times as epoch seconds and a node's state as
a lower-case word plus a list of upper-case flags; from 23.02 on (data_parser v0.0.39,
v0.0.42 in 24.11) numbers may be {"set", "infinite", "number"} and the state is one list
of flags: `_number` and `_node_state` read both.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.slurm.errors import SlurmCommandRefused, SlurmOutputError
from scheduler.slurm.hostlist import HostlistError, expand_hostlist

log = logging.getLogger(__name__)
# MAC writes its drain reasons as "MAC: <evidence>; <action>" and touches only those.
MAC_REASON_PREFIX = "MAC:"
# sacct's "no job matched" in a --json document: an empty answer, not an error.
SACCT_NOTHING_FOUND = 9003
# What the client asks sacct for, in this order, one job per line (--allocations).
SACCT_FORMAT = (
    "JobIDRaw", "JobID", "JobName", "User", "Account", "Partition", "State",
    "NodeList", "AllocTRES", "Submit", "Start", "End",
)  # fmt: skip
# The ASCII unit separator: no job name or account holds it, unlike sacct's default "|".
SACCT_DELIMITER = "\x1f"
FINISHED_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
     "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip
# States in which a job holds its nodes' GPUs (COMPLETING: its epilog still runs). 22.05
# names a running job by its passing flag (CONFIGURING while its nodes boot, SIGNALING,
# STAGE_OUT...): it holds them then too, and a row closed and opened again would move
# its start.
HOLDING_STATES = frozenset(
    {"RUNNING", "SUSPENDED", "COMPLETING", "STOPPED", "CONFIGURING", "RESIZING", "SIGNALING",
     "STAGE_OUT", "POWER_UP_NODE"}
)  # fmt: skip
_GRES_ENTRY = re.compile(
    r"(?P<name>[^:(,]+)(?::(?P<type>[^:(,]+))?:(?P<count>\d+)(?:\((?P<idx>[^)]*)\))?"
)
_RECORD_KEY = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)")
_RELEASE = re.compile(r"\b(\d+)\.(\d+)\.\d+")


@dataclass(frozen=True)
class SlurmNode:
    """One node as slurmctld sees it now."""

    name: str
    state: str  # the base state, lower case: idle, allocated, mixed, down, unknown, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, RESERVED, MAINTENANCE, ...
    reason: str
    reason_user: str | None  # who set the reason (scontrol's [user@time])
    reason_time: datetime | None
    gpus: int
    boot_time: datetime | None
    partitions: tuple[str, ...]

    @property
    def drain(self) -> bool:
        """Drained or draining: no new jobs start here."""
        return "DRAIN" in self.flags

    @property
    def drained(self) -> bool:
        """Drained and empty (sinfo's `drained`), as opposed to still draining."""
        return self.drain and self.state in ("idle", "down")

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def failed(self) -> bool:
        """Set FAIL by an administrator (`scontrol update State=FAIL`): to be taken out,
        with no DRAIN flag; a drain request would clear it."""
        return "FAIL" in self.flags

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.flags

    @property
    def reserved(self) -> bool:
        """In an active reservation (slurmctld marks nodes up to 5 s after it starts)."""
        return bool(self.flags & {"RESERVED", "MAINTENANCE"})

    @property
    def reboot_pending(self) -> bool:
        return bool(self.flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"})

    @property
    def out_of_service(self) -> bool:
        """Kept from new jobs (by a person, MAC or Slurm): drained, down, set to fail or to be
        rebooted (a reservation is not: its nodes serve their reservation's jobs)."""
        return self.drain or self.down or self.failed or self.reboot_pending

    @property
    def reason_is_mac(self) -> bool:
        """The reason is one MAC wrote (it starts with `MAC:`)."""
        return self.reason.startswith(MAC_REASON_PREFIX)

    @property
    def held_by_others(self) -> bool:
        """Drained, down or reserved by someone other than MAC (an administrator, Slurm).

        MAC never changes such a node: it does not drain it again with its own reason, and
        never resumes it.
        """
        # An administrator's `scontrol reboot` (no drain) is theirs too, as hold_of says.
        return self.reserved or (self.out_of_service and not self.reason_is_mac)


@dataclass(frozen=True)
class GpuAllocation:
    """The GPUs a job holds on one node: Slurm's GRES IDX, the order of gres.conf's File=."""

    node: str
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class SlurmJob:
    """One job, from slurmctld (`squeue`) or from accounting (`sacct`)."""

    job_id: int
    name: str
    user: str
    account: str
    partition: str
    state: str  # RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, ...
    nodes: tuple[str, ...]
    gpus: tuple[GpuAllocation, ...]  # per node, while slurmctld still knows them; else ()
    gpu_count: int  # GPUs allocated, all nodes together
    submitted: datetime | None
    started: datetime | None
    ended: datetime | None  # only once finished
    array_job_id: int | None = None
    array_task_id: int | None = None
    # The JobID Slurm shows people: "123_4" for an array's task, "123+1" for a
    # heterogeneous job's component, else the job id itself.
    slurm_id: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @property
    def holds_gpus(self) -> bool:
        return self.state in HOLDING_STATES

    def gpu_indexes(self, node: str) -> tuple[int, ...]:
        """The GPU indexes this job holds on `node` (empty when unknown or none)."""
        for allocation in self.gpus:
            if allocation.node == node:
                return allocation.indexes
        return ()


@dataclass(frozen=True)
class Reservation:
    """An administrator's reservation (`scontrol show reservation`)."""

    name: str
    nodes: tuple[str, ...]
    state: str  # ACTIVE or INACTIVE (not yet started)
    flags: frozenset[str]
    start: datetime | None
    end: datetime | None
    users: tuple[str, ...]

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


@dataclass(frozen=True)
class Controller:
    """One slurmctld as `scontrol ping` reports it."""

    role: str  # primary, backup1, ...
    host: str
    up: bool


# ------------------------------------------------------------------ JSON documents


def load_json(command: Sequence[str], text: str) -> dict[str, Any]:
    """The document a `--json` tool printed; its own errors become SlurmCommandRefused.

    22.05's sinfo/squeue exit 0 and report failures (slurmctld down included) in the
    document's "errors"; the client tells an unreachable controller apart with a ping.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmOutputError(command, f"not JSON ({exc}): {text[:200]!r}") from None
    if not isinstance(document, dict):
        raise SlurmOutputError(command, f"not a JSON object: {text[:200]!r}")
    errors = [
        error
        for error in document.get("errors") or []
        if _error_number(error) != SACCT_NOTHING_FOUND
    ]
    if errors:
        raise SlurmCommandRefused(command, "; ".join(_error_text(error) for error in errors))
    return document


def slurm_release(document: Mapping[str, Any]) -> str:
    """The Slurm release that answered ("22.05.8"), or "" when the document does not say."""
    meta = document.get("meta") or {}
    about = meta.get("slurm") or meta.get("Slurm") or {}  # "Slurm" in 22.05 only
    return str(about.get("release") or "")


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of `scontrol --version`: "slurm 22.05.8", "slurm-wlm 24.11.5" (Debian)."""
    match = _RELEASE.search(text)
    if not match:
        raise SlurmOutputError(("scontrol", "--version"), f"no Slurm release in {text[:200]!r}")
    return int(match[1]), int(match[2])


def parse_nodes(
    document: Mapping[str, Any], command: Sequence[str] = ("scontrol", "show", "nodes")
) -> list[SlurmNode]:
    """The nodes of a `{"nodes": [...]}` document: 22.05's `sinfo --json`, or
    `scontrol --json show nodes` of 23.02 and later.

    Any other shape is a SlurmOutputError, never "no nodes": MAC would take every node
    for unknown to Slurm. 23.02's `sinfo --json` is one: its groups share a state but not
    a reason (sinfo's default format does not match on it), so they cannot be read as
    nodes.
    """
    records = document.get("nodes")
    if not isinstance(records, list):
        if "sinfo" in document:
            detail = (
                "a sinfo --json of Slurm 23.02 or later: nodes grouped by partition and "
                "state, without each node's reason; read nodes with scontrol --json show nodes"
            )
        else:
            detail = f"no list of nodes in the document (keys: {', '.join(sorted(document))})"
        raise SlurmOutputError(command, detail)
    nodes = []
    for record in records:
        state, flags = _node_state(record)
        nodes.append(
            SlurmNode(
                name=record["name"],
                state=state,
                flags=flags,
                reason=record.get("reason") or "",
                reason_user=record.get("reason_set_by_user") or None,
                reason_time=_time(record.get("reason_changed_at")),
                gpus=gres_count(record.get("gres") or ""),
                boot_time=_time(record.get("boot_time")),
                partitions=tuple(record.get("partitions") or ()),
            )
        )
    return nodes


def parse_squeue_jobs(document: Mapping[str, Any]) -> list[SlurmJob]:
    """The jobs of a `squeue --json` document, with each node's GPU indexes where known."""
    jobs = []
    for record in document.get("jobs") or []:
        state = _job_state(record.get("job_state"))
        allocated = _allocated_nodes(record.get("job_resources") or {})
        nodes = tuple(allocated or _hosts(record.get("nodes")))
        # one entry per node, in the allocation's order; null where Slurm has none (24.05+)
        details = [d if isinstance(d, str) else "" for d in record.get("gres_detail") or []]
        gpus = tuple(
            GpuAllocation(node, gres_indexes(detail))
            for node, detail in zip(allocated, details, strict=False)
            if gres_indexes(detail)
        )
        finished = state in FINISHED_STATES
        # a pending job's start_time is the scheduler's estimate, not a start
        started = None if state == "PENDING" else _time(record.get("start_time"))
        jobs.append(
            SlurmJob(
                job_id=int(_number(record["job_id"])),
                name=record.get("name") or "",
                user=record.get("user_name") or str(_number(record.get("user_id"))),
                account=record.get("account") or "",
                partition=record.get("partition") or "",
                state=state,
                nodes=nodes if started else (),
                gpus=gpus,
                gpu_count=tres_gpus(record.get("tres_alloc_str") or ""),
                submitted=_time(record.get("submit_time")),
                started=started,
                ended=_time(record.get("end_time")) if finished else None,
                **_array(record.get("array_job_id"), record.get("array_task_id")),
                slurm_id=_shown_id(record),
            )
        )
    return jobs


def _allocated_nodes(resources: Mapping[str, Any]) -> list[str]:
    """The job's nodes in the order of its gres_detail: 22.05 to 23.11 list them as
    `allocated_nodes` ({"nodename"}), 24.05 and later as `nodes.allocation` ({"index",
    "name"}; `nodes` was the hostlist string before)."""
    listed = resources.get("allocated_nodes") or []
    if listed:
        return [node["nodename"] for node in listed]
    nodes = resources.get("nodes")
    if isinstance(nodes, Mapping):
        allocation = nodes.get("allocation") or []
        return [node["name"] for node in sorted(allocation, key=lambda n: n.get("index", 0))]
    return []


def parse_sacct(text: str) -> list[SlurmJob]:
    """The jobs of `sacct --parsable2 --noheader --delimiter=SACCT_DELIMITER
    --format=SACCT_FORMAT`, run with SLURM_TIME_FORMAT=%s (times as epoch seconds).

    Text, not --json: 22.05's sacct --json names a job's user only through its
    association, so on a cluster without associations every user is empty; the text
    output resolves the job's uid.

    A line of another shape (a job name with a newline splits its line in two, one with
    the delimiter has a field too many) is left out and logged: the other jobs still count.
    """
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(SACCT_DELIMITER)
        if len(values) != len(SACCT_FORMAT) or not _ascii_digits(values[0]):
            log.warning(
                "sacct: left out a line of %d fields (expected %d, a job id first): %r",
                len(values), len(SACCT_FORMAT), line[:300],
            )  # fmt: skip
            continue
        row = dict(zip(SACCT_FORMAT, values, strict=True))
        state = row["State"].split(" ", 1)[0].upper()  # "CANCELLED by 0"
        array_job, _, task = row["JobID"].partition("_")
        jobs.append(
            SlurmJob(
                job_id=int(row["JobIDRaw"]),
                name=row["JobName"],
                user=row["User"],
                account=row["Account"],
                partition=row["Partition"],
                state=state,
                nodes=tuple(_hosts(row["NodeList"])),
                gpus=(),
                gpu_count=tres_gpus(row["AllocTRES"]),
                submitted=_epoch_text(row["Submit"]),
                started=_epoch_text(row["Start"]),
                ended=_epoch_text(row["End"]) if state in FINISHED_STATES else None,
                **_array(array_job if task.isdigit() else None, task if task.isdigit() else None),
                slurm_id=row["JobID"],
            )
        )
    return jobs


# ------------------------------------------------------------------ text outputs


def parse_reservations(text: str) -> list[Reservation]:
    """The reservations of `scontrol show reservation -o` (one line each)."""
    reservations = []
    for line in text.splitlines():
        if "ReservationName=" not in line:
            continue  # "No reservations in the system"
        fields = parse_record(line)
        reservations.append(
            Reservation(
                name=fields["ReservationName"],
                nodes=tuple(_hosts(fields.get("Nodes"))),
                state=fields.get("State", ""),
                flags=frozenset(_null_split(fields.get("Flags"))),
                start=_scontrol_time(fields.get("StartTime")),
                end=_scontrol_time(fields.get("EndTime")),
                users=tuple(_null_split(fields.get("Users"))),
            )
        )
    return reservations


def parse_ping(text: str) -> list[Controller]:
    """The controllers of `scontrol ping`: "Slurmctld(primary) at host is UP"."""
    pattern = re.compile(r"Slurmctld\((?P<role>[^)]+)\) at (?P<host>\S+) is (?P<state>UP|DOWN)")
    return [
        Controller(match["role"], match["host"], match["state"] == "UP")
        for match in pattern.finditer(text)
    ]


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line as Key → value (values may hold spaces)."""
    fields = {}
    for part in _RECORD_KEY.split(line.strip()):
        key, _, value = part.partition("=")
        fields[key] = value
    return fields


# ------------------------------------------------------------------ GRES


def gres_indexes(detail: str, name: str = "gpu") -> tuple[int, ...]:
    """The indexes of `name` in a GRES detail: "gpu:h200:2(IDX:0,3)" → (0, 3)."""
    indexes: list[int] = []
    for match in _GRES_ENTRY.finditer(detail):
        idx = match["idx"] or ""
        if match["name"].strip(",") != name or not idx.startswith("IDX:"):
            continue  # another GRES, or a socket binding "(S:0-1)"
        spec = idx.removeprefix("IDX:")
        if spec in ("", "N/A"):
            continue
        for item in spec.split(","):
            first, _, last = item.partition("-")
            indexes.extend(range(int(first), int(last or first) + 1))
    return tuple(indexes)


def gres_count(gres: str, name: str = "gpu") -> int:
    """How many of `name` a node's Gres has: "gpu:4" or "gpu:h200:8(S:0-1)" → 4, 8."""
    return sum(
        int(match["count"])
        for match in _GRES_ENTRY.finditer(gres)
        if match["name"].strip(",") == name
    )


def tres_gpus(tres: str) -> int:
    """The GPUs of a TRES string: "cpu=2,node=2,gres/gpu=4" → 4.

    Slurm writes the untyped total beside the typed ones ("gres/gpu=2,gres/gpu:h200=2"),
    so the typed are summed only where no total is written: a site whose
    AccountingStorageTRES names only the typed one (gres/gpu:a100) gets only those.
    """
    total, typed = None, 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed += int(value)
    return typed if total is None else total


# ------------------------------------------------------------------ helpers


def _number(value: Any) -> Any:
    """A number as 22.05 writes it (plain) or as later releases do ({"set", "number"})."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value.get("number")
    return value


def _time(value: Any) -> datetime | None:
    seconds = _number(value)
    if not seconds or not isinstance(seconds, int | float):
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def _ascii_digits(value: str) -> bool:
    return value.isascii() and value.isdigit()  # "²".isdigit() holds, int() refuses it


def _epoch_text(value: str) -> datetime | None:
    """A time sacct wrote under SLURM_TIME_FORMAT=%s ("Unknown", "None" when unset)."""
    return _time(int(value)) if value.strip().isdigit() else None


def _node_state(record: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    """(base state, flags): 22.05 writes "idle" + ["DRAIN"], later ["IDLE", "DRAIN"]."""
    state = record.get("state")
    flags = set(record.get("state_flags") or ())
    if isinstance(state, list):
        base, *rest = state or ["unknown"]
        flags.update(rest)
        state = base
    return str(state or "unknown").lower(), frozenset(flag.upper() for flag in flags)


def _job_state(value: Any) -> str:
    if isinstance(value, list):  # v0.0.39 and on: ["RUNNING"], ["PENDING", "REQUEUED"]
        value = value[0] if value else ""
    return str(value or "").upper()


def _hosts(text: Any) -> list[str]:
    if not text or not isinstance(text, str):
        return []
    try:
        return expand_hostlist(text)
    except HostlistError as exc:
        raise SlurmOutputError(("hostlist",), str(exc)) from None


def _shown_id(record: Mapping[str, Any]) -> str:
    """squeue's record as Slurm names the job to people: 123_4, 123+1, or 130."""
    job_id = int(_number(record["job_id"]))
    array, task = _number(record.get("array_job_id")), _number(record.get("array_task_id"))
    if array and task is not None:
        return f"{int(array)}_{int(task)}"
    het, offset = _number(record.get("het_job_id")), _number(record.get("het_job_offset"))
    if het and offset is not None:
        return f"{int(het)}+{int(offset)}"
    return str(job_id)


def _array(job_id: Any, task_id: Any) -> dict[str, int | None]:
    job, task = _number(job_id), _number(task_id)
    if not job:  # 22.05 writes 0 for a job that is not part of an array
        return {"array_job_id": None, "array_task_id": None}
    return {"array_job_id": int(job), "array_task_id": None if task is None else int(task)}


def _null_split(value: str | None) -> list[str]:
    if not value or value == "(null)":
        return []
    return [item for item in value.split(",") if item]


def _scontrol_time(value: str | None) -> datetime | None:
    """scontrol's local "2026-12-03T18:47:39" as an aware datetime (None for Unknown)."""
    if not value or not value[:1].isdigit():
        return None
    try:
        return datetime.fromisoformat(value).astimezone()
    except ValueError:
        return None


def _error_number(error: Mapping[str, Any]) -> Any:
    return error.get("error_number", error.get("errno"))


def _error_text(error: Mapping[str, Any]) -> str:
    parts = [str(error[key]) for key in ("description", "error", "source") if error.get(key)]
    return ": ".join(parts) or json.dumps(error)
