"""The shared runtime of every agent exporter: isolate, time and serve collectors.

Each service is a list of *sources* (one per data source, in the spirit of
node_exporter's one-collector-per-file). A source yields fresh ``*MetricFamily``
objects per scrape, like a client_python custom collector. The runtime runs every
source in a thread pool with a deadline, so one hung source (an NFS ``statvfs``,
a wedged BMC, a stuck driver call) costs that source its samples for one scrape
and never stalls or blanks the whole ``/metrics`` answer. It also publishes, per
source, a success gauge, a duration and the time of the last success, and per
backend (NVML, amdsmi, a BMC...) whether it is available and, if not, why.
"""

from __future__ import annotations

import concurrent.futures
import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from contract import __version__
from node.config import NodeConfig
from node.host import Roots

log = logging.getLogger("exporters")

DEFAULT_COLLECTOR_TIMEOUT = 5.0


def mac_version() -> str:
    """MAC's version (contract.__version__, which the package metadata is built from)."""
    return __version__


def node_hostname() -> str:
    """The node's name as it registers (NODE_NAME, else the host name; lower-cased).

    Labels such as DCGM's ``Hostname`` are joined with the master's series of the node
    (docs/jobs.md), so the name is node.config's, normalised the same way. Only the
    process environment is read: the runtimes hand the services the env files'
    NODE_NAME. An empty one (Compose's ``${NODE_NAME:-}``) means none.
    """
    given = os.environ.get("NODE_NAME", "").strip()
    name, _ = NodeConfig(environ={"NODE_NAME": given} if given else {}).node_name()
    return name


@dataclass(frozen=True)
class Options:
    """What the command line gives every service builder."""

    roots: Roots = field(default_factory=Roots)
    hostname: str = field(default_factory=node_hostname)
    timeout: float = DEFAULT_COLLECTOR_TIMEOUT
    # Where a service keeps what a restart must not forget (the GPU exporters' evidence:
    # node.gpu.evidence_state); None: nothing is kept.
    state_dir: Path | None = None


@dataclass
class BackendStatus:
    """Whether a backend (a library, a device, a BMC) can be used, and why not."""

    name: str
    available: bool
    reason: str = ""


class Source(Protocol):
    """One data source. ``collect`` yields fresh metric families on every call.

    A source may set ``inline = True`` when it only reads procfs files that the
    kernel answers from memory (/proc/stat, /proc/meminfo...): those cannot block on
    I/O, so they skip the thread hand-off, which is most of a scrape's cost on a busy
    host. Everything that touches mounts, devices, commands or the network runs in
    the pool under the deadline.
    """

    name: str

    def collect(self) -> Iterable[Metric]: ...


@dataclass
class _SourceState:
    """What the runtime remembers about one source between scrapes."""

    future: concurrent.futures.Future | None = None
    success: bool = False
    duration: float = 0.0
    last_success: float = 0.0
    error: str = ""
    backends: list[BackendStatus] = field(default_factory=list)


class CollectorRunner:
    """The one collector registered in a service's registry: runs the sources.

    Each source that may block runs in its own pool thread; the scrape waits at most
    ``timeout`` seconds for all of them together. A source still running from an
    earlier scrape is not started twice: later scrapes wait on the same run, so a hung
    source holds one thread, not one per scrape. ``inline`` sources (in-memory procfs
    readers) run in the scraping thread, timed and isolated all the same.
    """

    def __init__(self, sources: Iterable[Source], timeout: float = DEFAULT_COLLECTOR_TIMEOUT):
        self.sources = list(sources)
        names = [source.name for source in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"collector names must be unique: {names}")
        self.timeout = timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, len(self.sources)) + 1, thread_name_prefix="collector"
        )
        self._lock = threading.Lock()
        self._state = {source.name: _SourceState() for source in self.sources}

    def _run(self, source: Source) -> list[Metric]:
        started = time.perf_counter()
        state = self._state[source.name]
        try:
            metrics = list(source.collect())
        except Exception as exc:  # any failure of one source must not blank the scrape
            state.success = False
            state.error = f"{type(exc).__name__}: {exc}"
            log.warning("collector %s failed: %s", source.name, state.error)
            raise
        finally:
            state.duration = time.perf_counter() - started
            backends = getattr(source, "backends", None)
            if callable(backends):
                state.backends = list(backends())
        state.success, state.error, state.last_success = True, "", time.time()
        return metrics

    def _submit(self, source: Source) -> concurrent.futures.Future:
        with self._lock:
            state = self._state[source.name]
            if state.future is None or state.future.done():
                state.future = self._pool.submit(self._run, source)
            return state.future

    def _inline(self, source: Source) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(self._run(source))
        except Exception as exc:  # recorded by _run; isolated here like a pool failure
            future.set_exception(exc)
        return future

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        futures: dict[str, concurrent.futures.Future | None] = dict.fromkeys(
            source.name for source in self.sources
        )
        # Sources that may block (mounts, devices, commands, the network) start first in
        # the pool; in-memory procfs readers then run here, overlapping with them.
        for source in self.sources:
            if not getattr(source, "inline", False):
                futures[source.name] = self._submit(source)
        for source in self.sources:
            if getattr(source, "inline", False):
                futures[source.name] = self._inline(source)
        remaining = max(0.0, self.timeout - (time.monotonic() - started))
        done, _ = concurrent.futures.wait(futures.values(), timeout=remaining)
        success = GaugeMetricFamily(
            "mac_exporter_collector_success",
            "1 when the collector finished within its deadline without error.",
            labels=["collector"],
        )
        duration = GaugeMetricFamily(
            "mac_exporter_collector_duration_seconds",
            "How long the collector's last completed run took.",
            labels=["collector"],
        )
        last = GaugeMetricFamily(
            "mac_exporter_collector_last_success_timestamp_seconds",
            "Unix time of the collector's last successful run (0 when never).",
            labels=["collector"],
        )
        for name, future in futures.items():
            state = self._state[name]
            ok = future in done and future.exception() is None
            if future not in done:
                state.success = False
                state.error = f"still running after {self.timeout:g}s deadline"
            if ok:
                yield from future.result()
            success.add_metric([name], 1.0 if ok else 0.0)
            duration.add_metric([name], self.timeout if future not in done else state.duration)
            last.add_metric([name], state.last_success)
        yield success
        yield duration
        yield last
        yield self._backend_family()

    def _backend_family(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "mac_exporter_backend_available",
            "1 when the backend (library, device, BMC) can be used; 0 with the reason why not.",
            labels=["backend", "reason"],
        )
        for backend in self.backends():
            family.add_metric([backend.name, backend.reason], 1.0 if backend.available else 0.0)
        return family

    def backends(self) -> list[BackendStatus]:
        return [backend for state in self._state.values() for backend in state.backends]

    def health(self) -> dict:
        """Per-collector and per-backend state as of the last scrape, for /health."""
        return {
            "collectors": {
                name: {
                    "success": state.success,
                    "last_success": state.last_success or None,
                    "error": state.error,
                }
                for name, state in self._state.items()
            },
            "backends": {
                backend.name: {"available": backend.available, "reason": backend.reason}
                for backend in self.backends()
            },
        }

    def close(self) -> None:
        # Hung sources may never return; do not wait for them on shutdown.
        self._pool.shutdown(wait=False, cancel_futures=True)


class BuildInfoSource:
    """``mac_exporter_build_info``: which service and MAC version answers here."""

    name = "build_info"
    inline = True

    def __init__(self, service: str):
        self.service = service

    def collect(self) -> Iterable[Metric]:
        info = InfoMetricFamily(
            "mac_exporter_build", "The MAC exporter service and version serving this endpoint."
        )
        info.add_metric([], {"service": self.service, "version": mac_version()})
        yield info


class NamedSamples:
    """A registry's samples of some names only: prometheus_client's ``name[]`` filter.

    ``GET /metrics?name[]=mac_gpu_health`` answers only those series, as client_python's
    own handlers do (a family left without samples is left out). The master's sweep asks
    the GPU exporters this way for their verdicts (contract.verdicts.VERDICT_QUERY). Every
    collector still runs: the verdict is judged from the same readings as the page.
    """

    def __init__(self, registry: CollectorRegistry, names: Iterable[str]) -> None:
        self.registry = registry
        self.names = frozenset(names)

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            samples = [sample for sample in family.samples if sample.name in self.names]
            if samples:
                kept = copy.copy(family)  # the same class: dcgm-exporter's counters stay exact
                kept.samples = samples
                yield kept


@dataclass
class Exporter:
    """A service ready to serve: its private registry plus what /health reports.

    ``routes`` are extra aiohttp routes (sys-manager's /diagnostics...);
    ``health_extra`` adds service-specific fields to /health (bmc-agent: whether
    the BMC answers). ``exposition`` writes /metrics from the registry (dcgm-exporter
    writes its counters without ``_total``, as the original does).
    """

    service: str
    sources: list[Source]
    timeout: float = DEFAULT_COLLECTOR_TIMEOUT
    routes: list = field(default_factory=list)
    health_extra: Callable[[], dict] | None = None
    exposition: Callable[[CollectorRegistry], bytes] = generate_latest

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.runner = CollectorRunner(
            [BuildInfoSource(self.service), *self.sources], timeout=self.timeout
        )
        self.registry.register(self.runner)

    def page(self, names: Iterable[str] = ()) -> bytes:
        """The /metrics text: every series, or only the samples named (``name[]``)."""
        names = list(names)
        return self.exposition(NamedSamples(self.registry, names) if names else self.registry)

    def health(self) -> dict:
        state = self.runner.health()
        # "degraded": serving, but some collector failed or missed its deadline last time.
        failing = any(col["error"] for col in state["collectors"].values())
        body = {
            "status": "degraded" if failing else "ok",
            "service": self.service,
            "version": mac_version(),
            **state,
        }
        if self.health_extra is not None:
            body.update(self.health_extra())
        return body

    def close(self) -> None:
        self.runner.close()
        # Sources that hold a thread of their own (sys-manager's ip_forward watch) stop too.
        for source in self.sources:
            closer = getattr(source, "close", None)
            if callable(closer):
                closer()
