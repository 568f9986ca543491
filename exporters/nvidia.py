"""dcgm-exporter: NVIDIA GPUs through NVML, under NVIDIA dcgm-exporter's names, types and labels.

Every field of dcgm-exporter's default counters that NVML can supply is here
(``exporters.nvidia_fields`` lists them with their units and types), and every sample
carries dcgm-exporter's labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``, so the DCGM Grafana
dashboards work against this exporter unchanged. ``Hostname`` keeps its capital H:
MAC's scrape targets carry their own ``hostname`` (the registered node name), and
the two never collide into ``exported_*`` labels (exporters/README.md).

Counters are exposed as dcgm-exporter exposes them: ``# TYPE <name> counter`` under
the DCGM name itself, with no ``_total`` (``generate_dcgm_latest``).

NVML comes from nvidia-ml-py (``pynvml``); the module object is injected so tests
hand in a fake at exactly that hardware boundary. A field whose question does not apply
here (``NVML_ERROR_NOT_SUPPORTED``, no permission for that call...:
``exporters.nvidia_fields.NOT_HERE``) or a blank value is skipped, never reported as a
number. Any other error of the handle or of any query takes the GPU out of reach
(``NVML_ERROR_GPU_IS_LOST``, a reset required, an unknown error, a timeout, missing
power): it is reported by ``mac_gpu_lost 1`` with the identity it had when it was last
seen, and judged unhealthy with NVML's words. A GPU the exporter may not open (no
permission on its handle) cannot be judged: it is served degraded, saying so, never
healthy and never left out (the master would take it for a missing GPU and drain).
The profiling fields come from NVML's GPM metrics where the GPU has them;
``mac_gpu_profiling_available`` says, per GPU, why they are absent elsewhere.

Each GPU's health verdict (``mac_gpu_health``, its evidence and the boot it belongs to:
exporters.gpu_health) is judged by node.gpu.health from the same scrape's answers and
every XID event, stamped with the wall time it was drained; its windows run on the
monotonic ``clock``. XID events that cannot be read ``XID_WAIT_FAILURES`` scrapes in a
row are evidence on every GPU (degraded): XID intake never stops in silence. The XIDs
the driver logged before the exporter started are read back once from the kernel log
(node.gpu.kernel_log), so a restart forgets none still within the evidence window; the
rest of the judge's memory (ECC and NVLink rises, the counters' last values, when each
condition was first seen) is kept in a file across restarts on the same boot
(node.gpu.evidence_state), except for a GPU that `mac gpu reset` reset in between (it
drops what the file keeps of it).
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.samples import Sample

from contract.verdicts import HealthAction, device_minor, slurm_gpu_order
from exporters.gpu_health import (
    evidence_backend,
    evidence_file,
    evidence_window,
    verdict_families,
)
from exporters.hpcjob import with_hpc_job
from exporters.nvidia_fields import (
    GpmSampler,
    GpuQuery,
    GpuState,
    dcgm_fields,
    gpm_metric_ids,
    health_reading,
    is_blank,
    not_here,
)
from exporters.runtime import BackendStatus, Exporter, Options
from node.config import node_config
from node.gpu.evidence_state import EvidenceState, gpu_key
from node.gpu.health import DEFAULT_WINDOW, GpuJudge, NvidiaReading
from node.gpu.kernel_log import KernelXid, pci_address, read_kernel_xids
from node.gpu.xid_catalog import lookup
from node.host import Roots, read_boot_id
from node.hpcjobs import read_mapping

log = logging.getLogger("exporters")

HPC_JOB_DIR_SETTING = "MAC_HPC_JOB_MAPPING_DIR"
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
# The verdict's series add the GPU's serial: the key of its fault history on the master.
HEALTH_LABELS = [*LABELS, "serial"]
# Scrapes in a row whose XID wait failed (not a timeout) before every GPU says so: one
# failure may be a passing driver hiccup. NVIDIA's k8s-device-plugin counted 3 too
# (maxSuccessiveEventErrorCount) before it marked every device unhealthy; MAC says
# degraded: the GPUs' own reads still judge them, only the XIDs go unseen.
XID_WAIT_FAILURES = 3
# The XIDs a GPU reset repairs: those whose action is at most a reset.
RESET_REPAIRS = HealthAction.RESET_GPU.severity


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class GpuIdentity:
    """What identifies a GPU in every sample; kept so a lost GPU is still named."""

    gpu: str
    uuid: str = ""
    pci_bus_id: str = ""
    device: str = ""
    model: str = ""
    serial: str = ""

    def labels(self, hostname: str, driver: str) -> list[str]:
        return [self.gpu, self.uuid, self.pci_bus_id, self.device, self.model, hostname, driver]

    def health_labels(self, hostname: str, driver: str) -> list[str]:
        return [*self.labels(hostname, driver), self.serial]

    def to_dict(self) -> dict:
        return asdict(self)


class ExactCounterFamily(Metric):
    """A counter whose samples keep the family's own name, as DCGM counters do.

    client_python's CounterMetricFamily names its samples ``<name>_total``;
    dcgm-exporter's DCGM_FI_DEV_PCIE_REPLAY_COUNTER has no such suffix, and
    dashboards query the bare name.
    """

    def __init__(self, name: str, documentation: str, labels: list[str]):
        super().__init__(name, documentation, "counter")
        self._labelnames = tuple(labels)

    def add_metric(self, labels: list[str], value: float) -> None:
        self.samples.append(
            Sample(self.name, dict(zip(self._labelnames, labels, strict=True)), value)
        )

    def untyped(self) -> Metric:
        copy = Metric(self.name, self.documentation, "unknown")
        copy.samples = list(self.samples)
        return copy


class _Families:
    """A collector over families already collected (generate_latest wants ``collect()``)."""

    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def generate_dcgm_latest(registry: CollectorRegistry) -> bytes:
    """The text format, with each ExactCounterFamily written as dcgm-exporter writes counters.

    generate_latest() names a counter's HELP and TYPE lines ``<name>_total``, which
    would not match the samples. So exact counters go through it untyped (sample
    lines and escaping stay client_python's) and only their TYPE line is then
    set to ``counter``.
    """
    families = list(registry.collect())
    exact = {family.name for family in families if isinstance(family, ExactCounterFamily)}
    text = generate_latest(
        _Families([f.untyped() if isinstance(f, ExactCounterFamily) else f for f in families])
    ).decode()
    prefix, untyped = "# TYPE ", " untyped"
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        if body.startswith(prefix) and body.endswith(untyped):
            name = body[len(prefix) : -len(untyped)]
            if name in exact:
                line = f"{prefix}{name} counter\n"
        lines.append(line)
    return "".join(lines).encode()


def _handle_key(handle) -> object:
    """Compare NVML handles by the address they point at (ctypes pointers are not equal)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


def _nvml_words(exc: Exception) -> str:
    """NVML's error in its own words, with its code: "Unknown Error (NVML error 999)"."""
    code = getattr(exc, "value", None)
    return f"{exc} (NVML error {code})" if code is not None else str(exc)


def _import_pynvml() -> ModuleType:
    import pynvml

    return pynvml


class NvmlSource:
    """Every DCGM_FI_* field per GPU, XID events as counters, lost GPUs flagged."""

    name = "nvml"

    def __init__(
        self,
        hostname: str,
        nvml: ModuleType | None = None,
        clock: Callable[[], float] = time.monotonic,  # NVLink rates and evidence windows
        *,
        roots: Roots | None = None,
        window: float = DEFAULT_WINDOW,
        wall: Callable[[], float] = time.time,
        hpc_job_dir: Path | None = None,
        kernel_log: Path | None = None,
        evidence_file: Path | None = None,
    ):
        self.hostname = hostname
        # /dev/kmsg, read once at the first scrape for the XIDs of before it (opt-in: the
        # fakes and tests never read the machine's own log)
        self._kernel_log = kernel_log
        self._kernel_backend: BackendStatus | None = None
        self._kernel_xids: list[KernelXid] | None = None  # not read yet
        self._hpc_job_dir = hpc_job_dir  # opt-in: dcgm-exporter's hpc_job label (exporters.hpcjob)
        self._nvml = nvml
        self._clock = clock  # NVLink rates, evidence windows: immune to NTP steps
        self._wall = wall  # when evidence was seen, as people read it
        self._roots = roots or Roots()
        self._judge = GpuJudge(window)
        # The judge's memory across restarts on this boot (opt-in, as the kernel log).
        self._evidence = EvidenceState(evidence_file, self._roots) if evidence_file else None
        self._states: dict[int, GpuState] = {}
        self._initialised = False
        self._backend = BackendStatus("nvml", False, "not initialised yet")
        self._identities: dict[int, GpuIdentity] = {}
        self._event_set = None
        # Every handle NVML gave, by address: an XID from a GPU whose handle fails in the
        # scrape that drains it (the one that just fell off) is still its own.
        self._handle_index: dict[object, int] = {}
        self._xid_watched: set[int] = set()  # GPUs registered for XID events
        self._xid_refused: set[int] = set()  # and those NVML would not register (logged once)
        self._driver = ""  # the driver version last read, for a scrape that cannot read it
        self._xids: Counter = Counter()  # (gpu index, xid) -> count since start
        self._last_xid: dict[int, int] = {}
        self._wait_failures = 0  # scrapes in a row whose XID wait failed
        self._wait_words = ""  # NVML's words for the last failure
        self._reach_logged: dict[int, str] = {}  # GPU -> NVML's words, logged once
        self._field_errors_logged: set[str] = set()  # "field: NVML's words", logged once
        self._lock = threading.Lock()

    def backends(self) -> list[BackendStatus]:
        kept = evidence_backend(self._evidence) if self._evidence is not None else None
        return [self._backend, *filter(None, [self._kernel_backend, kept])]

    @property
    def nvml(self) -> ModuleType:
        if self._nvml is None:
            self._nvml = _import_pynvml()
        return self._nvml

    def _init(self) -> bool:
        if self._initialised:
            return True
        try:
            nvml = self.nvml
        except ImportError:
            self._backend = BackendStatus("nvml", False, "nvidia-ml-py (pynvml) is not installed")
            return False
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._backend = BackendStatus("nvml", False, self._init_reason(exc))
            return False
        self._initialised = True
        self._backend = BackendStatus("nvml", True, "")
        return True

    def _init_reason(self, exc: Exception) -> str:
        nvml = self.nvml
        code = getattr(exc, "value", None)
        if code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return "libnvidia-ml.so.1 not found (no NVIDIA driver in this host or container)"
        if code == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return "NVIDIA kernel driver not loaded"
        if code == nvml.NVML_ERROR_NO_PERMISSION:
            return "no permission to open /dev/nvidia* (run with the NVIDIA Container Toolkit)"
        return f"nvmlInit failed: {exc}"

    def identity(self, index: int, handle) -> GpuIdentity:
        nvml = self.nvml
        known = self._identities.get(index)
        if known is not None and known.uuid:
            return known
        ident = GpuIdentity(gpu=str(index))
        ident.uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        ident.model = _text(nvml.nvmlDeviceGetName(handle))
        ident.pci_bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        try:
            ident.device = f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}"
        except nvml.NVMLError:
            ident.device = f"nvidia{index}"
        try:
            ident.serial = _text(nvml.nvmlDeviceGetSerial(handle))
        except nvml.NVMLError:
            ident.serial = ""  # boards without a serial (consumer GPUs): the UUID names it
        self._identities[index] = ident
        return ident

    def discover(self) -> list[GpuIdentity]:
        """The GPUs NVML sees (for the inventory API); empty when NVML is unavailable."""
        with self._lock:
            if not self._init():
                return []
            nvml = self.nvml
            found = []
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                log.warning("nvmlDeviceGetCount: %s", exc)
                return []
            for index in range(count):
                try:
                    found.append(self.identity(index, nvml.nvmlDeviceGetHandleByIndex(index)))
                except nvml.NVMLError as exc:
                    log.warning("GPU %s: %s", index, exc)
            return found

    def _drain_xid_events(self, handles: dict[int, object]) -> None:
        """Count XID events since the last scrape without blocking (wait of 0 ms)."""
        nvml = self.nvml
        if self._event_set is None:
            try:
                self._event_set = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                log.info("XID events unavailable: %s", exc)
                self._event_set = False
        if not self._event_set:
            return
        for index, handle in handles.items():
            self._handle_index[_handle_key(handle)] = index
            if index in self._xid_watched:
                continue
            # One GPU at a time: one that refuses (no XID events on it) leaves the others
            # watched, and a GPU seen later (back on the bus) is registered then.
            try:
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
                )
                self._xid_watched.add(index)
            except nvml.NVMLError as exc:
                if index not in self._xid_refused:
                    log.info("XID events unavailable for GPU %s: %s", index, exc)
                    self._xid_refused.add(index)
        while True:
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except nvml.NVMLError as exc:
                self._wait_failed(exc)
                return
            index = self._handle_index.get(_handle_key(event.device), -1)
            self._xids[(index, int(event.eventData))] += 1
            self._last_xid[index] = int(event.eventData)
            if index >= 0:
                self._judge.xid(index, int(event.eventData), self._wall(), self._clock())

    def _replay_kernel_log(self) -> None:
        """The XIDs the kernel logged before this exporter watched for them, to the judge.

        Read once, at the first scrape, once NVML is registered for events: an XID logged
        between the two reaches the judge twice, which changes nothing (it keeps the
        latest of each XID). They count in the verdict only: the XID counters and the last
        XID stay dcgm-exporter's, since this exporter started, so that a restart does not
        raise a counter by a whole boot's XIDs. A record naming a GPU NVML does not list
        (yet) waits for it, until the window has passed.
        """
        if self._kernel_log is None:
            return
        if self._kernel_xids is None:
            self._kernel_xids = self._read_kernel_log(self._kernel_log)
        if not self._kernel_xids:
            return
        tick, wall = self._clock(), self._wall()
        by_pci = {pci_address(ident.pci_bus_id): index for index, ident in self._identities.items()}
        waiting = []
        for xid in self._kernel_xids:
            if xid.since_boot <= tick - self._judge.window:
                continue
            index = by_pci.get(xid.pci)
            if index is None:
                waiting.append(xid)
                continue
            # The log's clock is the kernel's, a hair off the monotonic one: never later
            # than now.
            seen = min(xid.since_boot, tick)
            self._judge.xid(index, xid.code, wall - (tick - seen), seen)
            log.warning("GPU %s: XID %s from the kernel log: %s", index, xid.code, xid.text)
        self._kernel_xids = waiting

    def _read_kernel_log(self, path: Path) -> list[KernelXid]:
        """The XIDs in the kernel log still within the evidence window."""
        tick = self._clock()
        try:
            xids = read_kernel_xids(path)
        except OSError as exc:
            reason = (
                f"cannot read {path}: {exc.strerror or exc}; XIDs logged before the "
                "exporter started are not in the verdict (it needs CAP_SYSLOG where "
                "kernel.dmesg_restrict=1, printk.devkmsg not off, and the host's "
                "/dev/kmsg in a container)"
            )
            log.warning("%s", reason)
            self._kernel_backend = BackendStatus("kernel_log", False, reason)
            return []
        self._kernel_backend = BackendStatus("kernel_log", True, "")
        # A GPU reset repairs what a reset repairs (mac gpu reset logged one): not an XID
        # that asks for a reboot or a look at the hardware.
        recent = [
            xid
            for xid in xids
            if xid.since_boot > tick - self._judge.window
            and not (xid.reset and lookup(xid.code).action.severity <= RESET_REPAIRS)
        ]
        log.info(
            "kernel log %s: %d XIDs since boot, %d within the evidence window (%gs)",
            path, len(xids), len(recent), self._judge.window,
        )  # fmt: skip
        return recent

    def _wait_failed(self, exc: Exception) -> None:
        """Count a wait that failed; NVML_ERROR_TIMEOUT is no failure: nothing is pending."""
        if getattr(exc, "value", None) == self.nvml.NVML_ERROR_TIMEOUT:
            if self._wait_failures:
                log.info("XID events can be read again")
            self._wait_failures = 0
            return
        self._wait_failures += 1
        self._wait_words = _nvml_words(exc)
        if self._wait_failures in (1, XID_WAIT_FAILURES):
            log.warning(
                "nvmlEventSetWait failed (%s of %s in a row): %s",
                self._wait_failures, XID_WAIT_FAILURES, self._wait_words,
            )  # fmt: skip

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            families = list(self._collect())
        if self._hpc_job_dir is not None:
            # A host path: under Docker the host's / is the exporter's --rootfs.
            mapping = read_mapping(self._roots.host(str(self._hpc_job_dir)))
            families = with_hpc_job(families, self._by_nvml_index(mapping))
        yield from families

    def _by_nvml_index(self, mapping: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """The prolog's files, named by Slurm's GPU index, keyed by this exporter's instead,
        in the order the master maps jobs by (contract.verdicts.slurm_gpu_order); where a
        minor is unknown or shared, the files' names are taken as they are."""
        order = slurm_gpu_order(
            {index: device_minor(ident.device) for index, ident in self._identities.items()}
        )
        if order is None:
            return mapping
        return {
            str(order[int(name)]) if int(name) < len(order) else name: jobs
            for name, jobs in mapping.items()
        }

    def _state(self, index: int) -> GpuState:
        if index not in self._states:
            self._states[index] = GpuState(GpmSampler(gpm_metric_ids(self.nvml)))
        return self._states[index]

    def _collect(self) -> Iterable[Metric]:
        count = GaugeMetricFamily("mac_gpu_count", "GPUs NVML reports on this node.")
        lost = GaugeMetricFamily(
            "mac_gpu_lost",
            "1 when NVML cannot reach the GPU: lost from the bus (NVML_ERROR_GPU_IS_LOST), a "
            "reset required, or another error; the verdict's evidence says which.",
            labels=LABELS,
        )
        profiling = GaugeMetricFamily(
            "mac_gpu_profiling_available",
            "1 when the DCGM_FI_PROF_* fields come from NVML's GPM metrics, else 0 and why not.",
            labels=[*LABELS, "reason"],
        )
        if not self._init():
            count.add_metric([], 0)
            yield count
            return
        nvml = self.nvml
        try:
            driver = self._driver = _text(nvml.nvmlSystemGetDriverVersion())
            total = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            # The driver stopped answering after it started: every GPU it had is out of
            # reach, and says so, rather than the node going quiet with its last verdict.
            words = _nvml_words(exc)
            self._backend = BackendStatus("nvml", False, f"NVML stopped answering: {words}")
            count.add_metric([], len(self._identities))
            yield count
            readings = {
                index: NvidiaReading(index, ident.uuid, ident.serial, unreachable=words)
                for index, ident in self._identities.items()
            }
            for index in readings:
                ident = self._identities[index]
                lost.add_metric(ident.labels(self.hostname, self._driver), 1.0)
            yield lost
            yield from self._verdicts(readings, self._driver)
            return
        self._backend = BackendStatus("nvml", True, "")
        fields = dcgm_fields(nvml)
        families: dict[str, Metric] = {
            f.name: (ExactCounterFamily if f.kind == "counter" else GaugeMetricFamily)(
                f.name, f.help, labels=LABELS
            )
            for f in fields
        }
        xid_last = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=LABELS
        )
        xid_count = ExactCounterFamily(
            "DCGM_EXP_XID_ERRORS_COUNT",
            "Count of XID errors since the exporter started, by XID.",
            labels=[*LABELS, "xid"],
        )
        count.add_metric([], total)
        handles: dict[int, object] = {}
        readings: dict[int, NvidiaReading] = {}
        now = self._clock()
        for index in range(total):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                ident = self.identity(index, handle)
            except nvml.NVMLError as exc:
                ident = self._identities.get(index, GpuIdentity(gpu=str(index)))
                reading = readings[index] = self._unanswered(index, ident, exc)
                out_of_reach = 1.0 if reading.out_of_reach else 0.0
                lost.add_metric(ident.labels(self.hostname, driver), out_of_reach)
                continue
            handles[index] = handle
            labels = ident.labels(self.hostname, driver)
            state = self._state(index)
            query = GpuQuery(nvml, handle, state, now)
            failed, errors, answered = None, [], 0
            for f in fields:
                try:
                    value = f.read(query)
                except nvml.NVMLError as exc:
                    if not_here(nvml, exc):
                        continue  # skipped, never a fake number
                    if self._gone(exc):  # the GPU says itself that it is out of reach
                        failed = (f.name, exc)
                        break
                    errors.append((f.name, exc))  # one odd field is no verdict on the GPU
                    continue
                answered += 1
                if value is None or is_blank(value):
                    continue
                families[f.name].add_metric(labels, value)
            if failed is None and errors and not answered:
                failed = errors[0]  # nothing answers: out of reach (judged once it lasts)
            elif errors:
                self._log_errors(index, errors)
            reading = self._reading(query, index, ident, failed, bool(answered))
            readings[index] = reading
            lost.add_metric(labels, 1.0 if reading.out_of_reach else 0.0)
            if not reading.out_of_reach and state.gpm.supported is not None:
                available = 0.0 if state.gpm.reason else 1.0
                profiling.add_metric([*labels, state.gpm.reason], available)
        self._drain_xid_events(handles)
        self._replay_kernel_log()
        for index, known in self._identities.items():
            # dcgm-exporter reports 0 until a GPU has had an XID.
            xid_last.add_metric(known.labels(self.hostname, driver), self._last_xid.get(index, 0))
        for (index, xid), value in sorted(self._xids.items()):
            ident = self._identities.get(index, GpuIdentity(gpu=str(index)))
            xid_count.add_metric([*ident.labels(self.hostname, driver), str(xid)], value)
        yield count
        yield from families.values()
        yield xid_last
        yield xid_count
        yield lost
        yield profiling
        yield from self._verdicts(readings, driver)

    def _gone(self, exc: Exception) -> bool:
        """NVML's own word that the GPU is out of reach: lost, a reset required, no power."""
        nvml = self.nvml
        gone = (nvml.NVML_ERROR_GPU_IS_LOST, nvml.NVML_ERROR_RESET_REQUIRED,
                nvml.NVML_ERROR_INSUFFICIENT_POWER)  # fmt: skip
        return getattr(exc, "value", None) in gone

    def _log_errors(self, index: int, errors: list[tuple[str, Exception]]) -> None:
        """Fields that failed while others answered: logged (once per field and error)."""
        for name, exc in errors:
            words = f"{name}: {_nvml_words(exc)}"
            if words not in self._field_errors_logged:
                self._field_errors_logged.add(words)
                log.warning("GPU %s: %s (the field is skipped; other fields answer)", index, words)

    def _reading(
        self,
        query: GpuQuery,
        index: int,
        ident: GpuIdentity,
        failed: tuple[str, Exception] | None,
        answered: bool = True,
    ) -> NvidiaReading:
        """What the judge needs of one GPU; ``failed``: the field whose query took it out of
        reach, and NVML's error (the judge's own queries may do the same). A health query
        that fails while other fields answered tells nothing: its conditions stay as they
        were (None), unless NVML says the GPU is gone."""
        if failed is None:
            try:
                reading = health_reading(query, index, ident.uuid, ident.serial)
            except self.nvml.NVMLError as exc:
                if answered and not self._gone(exc):
                    self._log_errors(index, [("the health reading", exc)])
                    return NvidiaReading(index, ident.uuid, ident.serial)
                failed = ("the health reading", exc)
            else:
                self._reach_logged.pop(index, None)
                return reading
        what, exc = failed
        words = _nvml_words(exc)
        if self._reach_logged.get(index) != words:
            log.warning("GPU %s out of reach: %s: %s", index, what, words)
        self._reach_logged[index] = words
        return self._out_of_reach(index, ident, exc)

    def _verdicts(self, readings: dict[int, NvidiaReading], driver: str) -> list[Metric]:
        """Every GPU's verdict, judged after this scrape's XID events were drained."""
        wall, tick = self._wall(), self._clock()
        unread = self._wait_words if self._wait_failures >= XID_WAIT_FAILURES else ""
        judged = []
        for index, reading in sorted(readings.items()):
            ident = self._identities.get(index, GpuIdentity(gpu=str(index)))
            self._restore(index, ident)
            labels = ident.health_labels(self.hostname, driver)
            reading = replace(reading, xids_unread=unread)
            judged.append((labels, self._judge.nvidia(reading, wall, tick)))
        if self._evidence is not None:
            self._evidence.save(self._judge.memories())
        return verdict_families(judged, HEALTH_LABELS, read_boot_id(self._roots))

    def _restore(self, index: int, ident: GpuIdentity) -> None:
        """At a GPU's first sight, what the exporter's last run on this boot kept of it
        (`mac gpu reset` drops what it kept of a GPU it reset: forget_reset_gpu)."""
        if self._evidence is None:
            return
        kept = self._evidence.bind(index, gpu_key(index, ident.uuid, ident.serial))
        if kept is not None:
            self._judge.restore(index, kept.memory)

    def _unanswered(self, index: int, ident: GpuIdentity, exc: Exception) -> NvidiaReading:
        """The reading of a GPU NVML gave no handle or identity for, by NVML's error."""
        nvml = self.nvml
        code = getattr(exc, "value", None)
        access = (nvml.NVML_ERROR_NO_PERMISSION, nvml.NVML_ERROR_NOT_SUPPORTED,
                  nvml.NVML_ERROR_OPERATING_SYSTEM)  # fmt: skip
        if code in access:
            # How this exporter may open the GPU, not the GPU's state: it cannot be judged.
            log.warning("GPU %s: %s", index, exc)
            return NvidiaReading(index, ident.uuid, ident.serial, no_access=_nvml_words(exc))
        return self._out_of_reach(index, ident, exc)

    def _out_of_reach(self, index: int, ident: GpuIdentity, exc: Exception) -> NvidiaReading:
        """The reading of a GPU out of reach, by NVML's error."""
        nvml = self.nvml
        code = getattr(exc, "value", None)
        reading = NvidiaReading(index, ident.uuid, ident.serial)
        if code == nvml.NVML_ERROR_GPU_IS_LOST:
            reading.lost = True
        elif code == nvml.NVML_ERROR_RESET_REQUIRED:
            reading.reset_required = True
        elif code == nvml.NVML_ERROR_INSUFFICIENT_POWER:
            reading.insufficient_power = True  # XID 54's fault: the cables, not a reboot
        else:
            # An unknown error (what many drivers answer after an XID 79), a timeout, an
            # IRQ problem: a GPU nothing can use is not a healthy one.
            reading.unreachable = _nvml_words(exc)
        return reading


def build(options: Options) -> Exporter:
    source = NvmlSource(
        options.hostname,
        roots=options.roots,
        window=evidence_window(options),
        hpc_job_dir=node_config(options.roots).value_or_default(HPC_JOB_DIR_SETTING, log.error),
        kernel_log=options.roots.dev("kmsg"),
        evidence_file=evidence_file(options, "dcgm-exporter"),
    )
    return Exporter(
        "dcgm-exporter",
        [source],
        timeout=options.timeout,
        exposition=generate_dcgm_latest,
    )
