"""Probe a fleet of agents over HTTP: plain asyncio, no Django.

Given targets (node id, address, the exporters the node reported), this module
GETs every node's sys-exporter `/metrics` (the heartbeat), the liveness URL of
each other exporter the node reported, and nic-exporter (host network) so that
an offline node can be diagnosed. It returns plain dataclasses; deciding what the
results mean for the inventory is the sweep's job (healthcheck.sweep).

Why it is built this way:
- An asyncio.Semaphore bounds the number of probes in flight. The deadline of
  a probe starts when it gets its slot, never while it waits for one, so a
  large fleet with many dead nodes cannot make a live node look slow.
- Each probe is one HTTP/1.1 GET over a bare asyncio transport (connect, send
  a fixed request, read at most READ_CAP bytes, close) instead of an aiohttp
  ClientSession. Measured on the 2-core test machines: aiohttp costs about
  0.46 ms of CPU per probe, this exchange about 0.16 ms, and at 10,000 nodes
  that difference is what decides whether a sweep fits in the probe timeout
  plus two seconds (docs/probing.md, docs/benchmarks.md).
- Ports and paths come only from contract.services (the agent names a service,
  never a URL), redirects are not followed (a 3xx is just a status) and at most
  READ_CAP bytes are read, so a hostile or broken agent can neither point the
  master elsewhere nor feed it a huge body.
- The exposition check (contract.httpwire) is a compiled regular expression over the first
  complete lines, not prometheus_client's parser: at 10,000 nodes every
  100 microseconds per body is a second of sweep time.
- Probes run in the order given; the sweep puts nodes that were offline
  first, so their timeouts overlap with the live nodes' quick answers.

`check_url` runs the same exchange once, blocking, for `mac status` and the node's
checks, and `outcome_words` says a result in a few words: one way to judge a
liveness URL on both sides.

`python -m testkit.probe_runner ADDR...` runs one probe from the command line and
prints JSON; the network-namespace tests run it inside the master namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import resource
from collections.abc import Iterable
from dataclasses import dataclass, field

from contract.httpwire import HttpExchange, judge_answer, request_bytes
from contract.outcomes import Outcome
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, Service

DEFAULT_TIMEOUT = 3.0
DEFAULT_CONCURRENCY = 1000
FD_RESERVE = 256  # descriptors kept free for the database, Redis and logs


@dataclass(frozen=True, slots=True)
class Target:
    """One node to probe: what the sweep loads from the inventory."""

    node_id: int
    ip: str
    # Service names the node reported (registration's `exporters` keys). Ports
    # are taken from contract.services, never from the agent.
    exporters: tuple[str, ...] = ()
    # The node was Online: a failed probe is repeated once before it counts.
    confirm: bool = False


@dataclass(slots=True)
class ProbeResult:
    """One GET of one liveness URL."""

    service: str
    outcome: Outcome
    http_status: int | None = None
    detail: str = ""
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    @property
    def host_answered(self) -> bool:
        """The host's TCP stack answered (even a refusal proves it is up)."""
        return self.outcome in (
            Outcome.OK,
            Outcome.REFUSED,
            Outcome.HTTP_STATUS,
            Outcome.BAD_BODY,
        )


@dataclass(slots=True)
class NodeProbe:
    """Every probe of one node in one sweep, by service name."""

    node_id: int
    ip: str
    results: dict[str, ProbeResult] = field(default_factory=dict)

    @property
    def sys(self) -> ProbeResult:
        return self.results[SYS_EXPORTER.name]

    @property
    def nic(self) -> ProbeResult | None:
        return self.results.get(NIC_EXPORTER.name)

    def health(self) -> dict[str, bool]:
        """{service: up} for every service probed (what Node.exporter_health keeps)."""
        return {name: result.ok for name, result in sorted(self.results.items())}


@dataclass(slots=True)
class ProbeStats:
    """What only the probe run knows (outcome counts can be read off the results)."""

    confirmed: int = 0  # nodes whose failures were probed a second time


def services_to_probe(reported: Iterable[str]) -> list[Service]:
    """sys-exporter and nic-exporter always, plus every known service the node reported.

    nic-exporter runs on the host network, so it answers even when IPv4
    forwarding is off: probing it every sweep is what lets the master tell
    "forwarding off" from "host down" without a second round of probes.
    """
    names = {SYS_EXPORTER.name, NIC_EXPORTER.name}
    names.update(name for name in reported if name in BY_NAME)
    return [BY_NAME[name] for name in sorted(names)]


def _classify_os_error(exc: OSError) -> tuple[Outcome, str]:
    code = exc.errno
    if code == errno.ECONNREFUSED:
        return Outcome.REFUSED, "connection refused"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN):
        return Outcome.UNREACHABLE, f"unreachable ({exc.strerror})"
    if code == errno.ETIMEDOUT:
        return Outcome.TIMEOUT, "connect timed out"
    return Outcome.ERROR, f"{exc.strerror or type(exc).__name__}"


async def probe_url(service: Service, ip: str, timeout: float) -> ProbeResult:
    """One GET with a hard deadline; never raises (the sweep must judge every node).

    The deadline covers connect, request and answer together. Redirects are
    never followed: a 3xx is an HTTP status like any other.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    transport: asyncio.BaseTransport | None = None
    try:
        async with asyncio.timeout(timeout):
            done = loop.create_future()
            exchange = HttpExchange(request_bytes(ip, service), done)
            transport, _ = await loop.create_connection(lambda: exchange, ip, service.port)
            await done
        outcome, status, detail = judge_answer(service, bytes(exchange.buffer), exchange.truncated)
    except TimeoutError:
        outcome, status, detail = Outcome.TIMEOUT, None, f"no answer within {timeout:g} s"
    except OSError as exc:
        status = None
        outcome, detail = _classify_os_error(exc)
        detail = f"port {service.port}: {detail}"
    finally:
        if transport is not None:
            transport.abort()
    elapsed = timeout if outcome is Outcome.TIMEOUT else loop.time() - started
    return ProbeResult(service.name, outcome, status, detail[:200], elapsed)


def check_url(host: str, port: int, path: str, timeout: float = DEFAULT_TIMEOUT) -> ProbeResult:
    """One blocking GET of one liveness URL, judged exactly as the sweep judges it.

    For synchronous callers (`mac status`, the checks of `mac doctor` and
    sys-manager), never from inside a running event loop.
    """
    service = Service(f"{host}:{port}", port, "", path, "")
    return asyncio.run(probe_url(service, host, timeout))


_WORDS = {
    Outcome.OK: "ok",
    Outcome.TIMEOUT: "timeout",
    Outcome.REFUSED: "refused",
    Outcome.UNREACHABLE: "unreachable",
    Outcome.BAD_BODY: "bad body",
}


def outcome_words(result: ProbeResult) -> str:
    """A probe's result in a few words for a table cell: "ok", "HTTP 503", "timeout"..."""
    if result.outcome is Outcome.HTTP_STATUS:
        return f"HTTP {result.http_status}"
    if result.outcome in _WORDS:
        return _WORDS[result.outcome]
    return f"error: {result.detail}" if result.detail else "error"


async def probe_targets(
    targets: Iterable[Target],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    concurrency: int = DEFAULT_CONCURRENCY,
    stats: ProbeStats | None = None,
) -> list[NodeProbe]:
    """Probe every target; one NodeProbe per target, in the targets' order.

    Failures of targets marked `confirm` (nodes that were Online) are probed a
    second time once the first round is over, and the second answer counts. The
    first round can run thousands of probes at once on a busy machine; the
    second is small and quiet, so a live node that merely answered while our own
    event loop was starved is not declared Offline. A node that really died costs
    one more timeout, once, in the sweep that notices it.
    """
    semaphore = asyncio.Semaphore(max(1, concurrency))
    targets = list(targets)
    nodes: list[NodeProbe] = []
    jobs: list[tuple[NodeProbe, Service]] = []
    for target in targets:
        node = NodeProbe(target.node_id, target.ip)
        nodes.append(node)
        jobs.extend((node, service) for service in services_to_probe(target.exporters))

    async def run(node: NodeProbe, service: Service) -> None:
        async with semaphore:  # the deadline starts only once the slot is ours
            node.results[service.name] = await probe_url(service, node.ip, timeout)

    await asyncio.gather(*(run(node, service) for node, service in jobs))
    retry = [
        (node, BY_NAME[name])
        for node, target in zip(nodes, targets, strict=True)
        if target.confirm and not node.sys.ok
        for name, result in node.results.items()
        if not result.ok
    ]
    if retry:
        await asyncio.gather(*(run(node, service) for node, service in retry))

    if stats is not None:
        stats.confirmed = len({id(node) for node, _ in retry})
    return nodes


def raise_nofile_limit() -> int:
    """Raise the soft open-files limit to the hard one; returns the soft limit now in force.

    Every probe in flight holds a socket: 1,024 (a common default soft limit) is
    less than a large sweep's concurrency, and running out would turn live nodes
    into "error" results.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def usable_concurrency(wanted: int) -> int:
    """`wanted`, but never more sockets than the open-files limit leaves room for."""
    limit = raise_nofile_limit()
    if limit == resource.RLIM_INFINITY:
        return max(1, wanted)
    return max(1, min(wanted, limit - FD_RESERVE))


def run_probe(
    targets: Iterable[Target],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    concurrency: int = DEFAULT_CONCURRENCY,
    stats: ProbeStats | None = None,
) -> list[NodeProbe]:
    """Synchronous entry point for the sweep (a Celery task is not a coroutine)."""
    concurrency = usable_concurrency(concurrency)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(
            probe_targets(targets, timeout=timeout, concurrency=concurrency, stats=stats)
        )


def loop_factory():
    """uvloop's event loop when installed (about 40 % less CPU per probe), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop
