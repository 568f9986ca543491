"""What a GPU exporter's judge remembers, kept in a file across a restart of the exporter.

The judge (node.gpu.health) keeps, per GPU, the evidence that clears after a window: the
rises of the ECC and NVLink counters with the counters' last values, and when each
condition was first seen. An agent upgrade, a crash or a container restart would forget
it: an uncorrectable ECC error judged a minute before would be gone (the node resumed, or
never drained), a rise while the exporter was down never seen (the first reading after
it would become the new base), and a verdict that did not change would change bytes.
So each GPU exporter writes that memory to ``gpu-evidence-<service>.json`` in its state
folder whenever it changed (at most once a scrape: it is written at the end of one) and
reads it once when it starts.

Only on the same boot. The windows run on CLOCK_MONOTONIC (``time.monotonic()``), one
clock for the whole system from boot, so the ticks in the file still mean what they
meant; after a reboot they do not, and the driver's counters started again too: a file
of another boot (the kernel's ``boot_id``) is left unread.

Each GPU is kept under its UUID, else its serial, else its index (``gpu_key``), and given
back when the exporter first lists a GPU under that key: a GPU renumbered across the
restart keeps its own evidence, a GPU replaced at that index gets none. The XIDs are not
kept: the kernel log holds every one of the boot and says which a `mac gpu reset`
repaired (node.gpu.kernel_log); the exporter reads them back from there.

A file that cannot be read, is not MAC's, or is another version's, or a folder that cannot
be written, never stops the exporter: it judges from scratch, logs a warning once, and
``problem()`` says why (the exporters serve it as
``mac_exporter_backend_available{backend="evidence_state"}``).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contract.atomicfile import write_atomically
from node.gpu.health import GpuMemory
from node.host import Roots, read_boot_id

log = logging.getLogger("exporters")

VERSION = 1


def state_file_name(service: str) -> str:
    """The file a GPU exporter keeps its evidence in, in its state folder."""
    return f"gpu-evidence-{service}.json"


def gpu_key(index: int, uuid: str = "", serial: str = "", partition: str = "") -> str:
    """What a GPU's evidence is kept under: its UUID, else its serial, else its index; an
    AMD partition (CPX...) other than the whole GPU's 0 adds its own number, as the
    partitions of one GPU may share its serial."""
    name = uuid or serial
    if not name:
        return f"index {index}"
    return name if partition in ("", "0") else f"{name} partition {partition}"


@dataclass
class KeptGpu:
    """What is kept of one GPU: the judge's memory, and what the exporter itself follows
    of it beside the judge (rocm-exporter: each RAS block's count, and the identity the GPU
    last answered with), as named numbers and names."""

    memory: GpuMemory
    counts: dict[str, dict[str, float]] = field(default_factory=dict)
    identity: dict[str, str] = field(default_factory=dict)
    # The exporter's index of the GPU when last judged: `mac gpu reset` names an AMD GPU by
    # its index alone (forget_reset_gpu).
    index: int | None = None


class StateError(ValueError):
    """The file is not a state file this MAC reads; the words say why."""


class EvidenceState:
    """The state file of one GPU exporter: read at the first scrape, written at the end of
    each scrape whose memory changed.

    ``bind`` ties a judged GPU (the judge's index) to its key and gives back, at that
    GPU's first sight, what was kept of it; ``save`` writes what the judge now keeps of
    every bound GPU, and what was kept of GPUs not listed since the start (a GPU off the
    bus for a scrape keeps its evidence).
    """

    def __init__(self, path: Path, roots: Roots) -> None:
        self.path = path
        self._roots = roots
        self._boot_id: str | None = None  # None: not read yet
        self._kept: dict[str, KeptGpu] = {}  # read from the file, not bound yet
        self._keys: dict[int, str] = {}  # judge's index -> key
        self._written: dict | None = None  # the GPUs as last written
        self._load_problem = ""
        self._write_problem = ""

    def problem(self) -> str:
        """Why the evidence is not kept across restarts now, or was not restored at this
        start; empty when it is."""
        return self._write_problem or self._load_problem

    def bind(self, index: int, key: str) -> KeptGpu | None:
        """GPU ``index`` is ``key``: what was kept of it, the first time it is bound under
        that key (None after, and where nothing was kept)."""
        self._load()
        if self._keys.get(index) == key:
            return None
        self._keys[index] = key
        return self._kept.pop(key, None)

    def save(
        self,
        memories: Mapping[int, GpuMemory],
        counts: Mapping[int, dict[str, dict[str, float]]] | None = None,
        identities: Mapping[int, dict[str, str]] | None = None,
    ) -> None:
        """Write what is kept of every bound GPU (the judge's ``memories``, and what the
        exporter follows beside it), if it changed since the last write."""
        self._load()
        if not self._boot_id:
            return
        counts, identities = counts or {}, identities or {}
        gpus = dict(self._kept)
        for index, key in self._keys.items():
            if index in memories:
                kept = KeptGpu(
                    memories[index], counts.get(index, {}), identities.get(index, {}), index
                )
                gpus[key] = kept
        body = {key: _encode(kept) for key, kept in sorted(gpus.items())}
        if body == self._written:
            return
        document = {
            "version": VERSION,
            "boot_id": self._boot_id,
            "gpus": body,
        }
        try:
            self._write(json.dumps(document, sort_keys=True))
        except OSError as exc:
            reason = (
                f"cannot write {self.path}: {exc.strerror or exc}; a restart of the exporter "
                "forgets the GPUs' evidence (give it a writable --state-dir)"
            )
            if reason != self._write_problem:
                log.warning("%s", reason)
            self._write_problem = reason
            return
        if self._write_problem:
            log.info("%s is written again", self.path)
        self._write_problem, self._written = "", body

    def _write(self, text: str) -> None:
        # Temporary file and rename (write_atomically): a crash mid-write leaves the last
        # whole file.
        write_atomically(self.path, text.encode(), mode=0o644)

    def _load(self) -> None:
        """Read the file, once."""
        if self._boot_id is not None:
            return
        self._boot_id = read_boot_id(self._roots)
        if not self._boot_id:
            where = self._roots.proc("sys", "kernel", "random", "boot_id")
            self._load_problem = (
                f"cannot read the kernel's boot id ({where}): the GPUs' evidence is not kept "
                "across restarts of the exporter (a file of another boot must never be read)"
            )
            log.warning("%s", self._load_problem)
            return
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            self._restore_failed(f"cannot read {self.path}: {getattr(exc, 'strerror', 0) or exc}")
            return
        try:
            boot_id, kept = decode(json.loads(text))
        except (ValueError, StateError) as exc:  # json's errors are ValueErrors
            self._restore_failed(f"{self.path} is not a GPU evidence file MAC reads: {exc}")
            return
        if boot_id != self._boot_id:
            log.info(
                "%s is of another boot (%s): the driver's counters started again with this "
                "one, so nothing in it is restored",
                self.path, boot_id or "none given",
            )  # fmt: skip
            return
        self._kept = kept
        log.info("%s: the evidence of %d GPU(s) restored", self.path, len(kept))

    def _restore_failed(self, why: str) -> None:
        self._load_problem = (
            f"{why}; judged from scratch: evidence from before the exporter started is lost"
        )
        log.warning("%s", self._load_problem)


def forget_reset_gpu(folder: Path, index: int, uuid: str = "") -> tuple[list[str], list[str]]:
    """What `mac gpu reset` does once it reset a GPU, its exporter stopped: drop what every
    GPU exporter's file in ``folder`` keeps of that GPU, so the exporter it starts again
    judges the repaired GPU afresh. The GPU is its UUID where the command knows it, else
    its index (AMD's, as amd-smi numbers it). Done here, by the one process that knows a
    reset happened, rather than by comparing the reset's time with the file's: the kernel
    log's clock and the exporter's monotonic one drift apart by minutes over weeks.

    Returns (the files it changed, problems in words); never raises: the reset is done,
    and a file left as it was costs at most a verdict until its window ends.
    """
    changed, problems = [], []
    for path in sorted(folder.glob(state_file_name("*"))):
        try:
            document = json.loads(path.read_text())
            gpus = _mapping(_mapping(document, "the file").get("gpus"), "gpus")
        except (OSError, ValueError, StateError) as exc:
            problems.append(f"{path}: {getattr(exc, 'strerror', 0) or exc}")
            continue
        keep = {key: entry for key, entry in gpus.items() if not _names(key, entry, index, uuid)}
        if len(keep) == len(gpus):
            continue
        document["gpus"] = keep
        try:
            write_atomically(path, json.dumps(document, sort_keys=True).encode(), mode=0o644)
        except OSError as exc:
            problems.append(f"cannot write {path}: {exc.strerror or exc}")
            continue
        changed.append(str(path))
    return changed, problems


def _names(key: str, entry: object, index: int, uuid: str) -> bool:
    """Whether a kept GPU is the one named: by its UUID where one is given (the index may
    have moved), else by the index it was last judged at."""
    if uuid:
        return key == uuid or key.startswith(f"{uuid} partition ")
    return isinstance(entry, dict) and entry.get("index") == index


def _encode(kept: KeptGpu) -> dict:
    memory = kept.memory
    return {
        "counters": {
            name: {"last": watch.last, "rises": [list(rise) for rise in watch.rises]}
            for name, watch in sorted(memory.counters.items())
        },
        "since": dict(sorted(memory.since.items())),
        "ticks": dict(sorted(memory.ticks.items())),
        "recovery": memory.recovery,
        "counts": {section: dict(sorted(v.items())) for section, v in sorted(kept.counts.items())},
        "identity": dict(sorted(kept.identity.items())),
        "index": kept.index,
    }


def decode(document: object) -> tuple[str, dict[str, KeptGpu]]:
    """(boot id, every GPU kept) of a state file's JSON; StateError names what is wrong
    with it."""
    top = _mapping(document, "the file")
    if top.get("version") != VERSION:
        raise StateError(f"version {top.get('version')!r}, this MAC reads version {VERSION}")
    boot_id = top.get("boot_id")
    if not isinstance(boot_id, str):
        raise StateError("no boot_id")
    gpus = _mapping(top.get("gpus"), "gpus")
    return boot_id, {key: _decode(key, value) for key, value in gpus.items()}


def _decode(key: str, value: object) -> KeptGpu:
    gpu = _mapping(value, key)
    memory = GpuMemory()
    for name, counter in _mapping(gpu.get("counters", {}), f"{key} counters").items():
        fields = _mapping(counter, f"{key} counter {name}")
        watch = memory.counter(name)
        last = fields.get("last")
        watch.last = None if last is None else _number(last, f"{key} {name} last")
        rises = fields.get("rises", [])
        if not isinstance(rises, list):
            raise StateError(f"{key} {name} rises: not a list")
        watch.rises = deque(_rise(rise, f"{key} {name} rise") for rise in rises)
    memory.since = _numbers(gpu.get("since", {}), f"{key} since")
    memory.ticks = _numbers(gpu.get("ticks", {}), f"{key} ticks")
    recovery = gpu.get("recovery", 0)
    if not isinstance(recovery, int) or isinstance(recovery, bool):
        raise StateError(f"{key} recovery: not a whole number")
    memory.recovery = recovery
    counts = {
        section: _numbers(numbers, f"{key} counts {section}")
        for section, numbers in _mapping(gpu.get("counts", {}), f"{key} counts").items()
    }
    identity = _mapping(gpu.get("identity", {}), f"{key} identity")
    if not all(isinstance(name, str) for name in identity.values()):
        raise StateError(f"{key} identity: not all text")
    index = gpu.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise StateError(f"{key} index: not a whole number")
    return KeptGpu(memory, counts, dict(identity), index)


def _mapping(value: object, what: str) -> dict:
    if not isinstance(value, dict):
        raise StateError(f"{what}: not an object")
    return value


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StateError(f"{what}: not a number")
    return float(value)


def _numbers(value: object, what: str) -> dict[str, float]:
    numbers = _mapping(value, what)
    return {name: _number(number, f"{what} {name}") for name, number in numbers.items()}


def _rise(value: object, what: str) -> tuple[float, float, float]:
    if not isinstance(value, list) or len(value) != 3:
        raise StateError(f"{what}: not [tick, time, by how much]")
    tick, at, by = (_number(number, what) for number in value)
    return tick, at, by
