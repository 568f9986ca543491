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
- A node that was Online gets its second chance inside the same deadline, not in
  a round after it: a probe that has not answered well by half the timeout opens
  a second connection, and the first good answer of either counts. A node that
  dies or is cut off is therefore Offline one timeout after the sweep starts, so
  at most one interval plus one timeout after it died; only a connection the
  node accepted but answers late waits one timeout more (docs/probing.md).

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

from contract.httpwire import READ_CAP, HttpExchange, answer_body, judge_answer, request_bytes
from contract.outcomes import Outcome
from contract.services import BY_NAME, NIC_EXPORTER, SYS_EXPORTER, Service
from contract.verdicts import VERDICT_READ_CAP

DEFAULT_TIMEOUT = 3.0
DEFAULT_CONCURRENCY = 1000
FD_RESERVE = 256  # descriptors kept free for the database, Redis and logs
# When a node that was Online gets its second connection, as a fraction of the timeout:
# late enough that a live node has long answered (loopback answers take milliseconds,
# a busy LAN tens of them), early enough that the second try has time of its own.
SECOND_CHANCE_AT = 0.5


@dataclass(frozen=True, slots=True)
class Target:
    """One node to probe: what the sweep loads from the inventory."""

    node_id: int
    ip: str
    # Service names the node reported (registration's `exporters` keys). Ports
    # are taken from contract.services, never from the agent.
    exporters: tuple[str, ...] = ()
    # The node was Online: each probe gets a second connection inside its deadline
    # when the first has not answered well by SECOND_CHANCE_AT of the timeout.
    confirm: bool = False


@dataclass(slots=True)
class ProbeResult:
    """One GET of one liveness URL."""

    service: str
    outcome: Outcome
    http_status: int | None = None
    detail: str = ""
    elapsed: float = 0.0
    attempts: int = 1  # 2 when a second connection was opened (probe_confirmed)
    # A service with a probe query (the GPU exporters): the body it answered, and whether
    # the read cap cut it; the sweep reads the GPU verdicts from it (contract.verdicts).
    answer: bytes | None = None
    cut: bool = False
    # The TCP connection opened: a timeout after it is the service's silence, one before
    # it may be a firewall dropping the packets (node.checks.services tells them apart).
    connected: bool = False

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

    confirmed: int = 0  # nodes that were Online and needed a second connection


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


async def probe_url(
    service: Service, ip: str, timeout: float, *, answer_grace: float = 0.0
) -> ProbeResult:
    """One GET with a hard deadline; never raises (the sweep must judge every node).

    The deadline covers connect, request and answer together; once the connection
    is up it moves `answer_grace` seconds later (probe_confirmed). Redirects are
    never followed: a 3xx is an HTTP status like any other.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    transport: asyncio.BaseTransport | None = None
    done = loop.create_future()
    cap = VERDICT_READ_CAP if service.probe_query else READ_CAP
    exchange = HttpExchange(request_bytes(ip, service), done, cap)
    waited = timeout
    try:
        async with asyncio.timeout(timeout) as deadline:
            transport, _ = await loop.create_connection(lambda: exchange, ip, service.port)
            if answer_grace > 0:
                deadline.reschedule(started + timeout + answer_grace)
                waited += answer_grace
            await done
        outcome, status, detail = judge_answer(service, bytes(exchange.buffer), exchange.truncated)
    except TimeoutError:
        if done.done() and not done.cancelled():
            # The whole answer was in before the deadline, but a busy loop ran our
            # timer first: the node answered in time, so judge what it said.
            outcome, status, detail = judge_answer(
                service, bytes(exchange.buffer), exchange.truncated
            )
        else:
            outcome, status, detail = Outcome.TIMEOUT, None, f"no answer within {waited:g} s"
    except OSError as exc:
        status = None
        outcome, detail = _classify_os_error(exc)
        detail = f"port {service.port}: {detail}"
    finally:
        if transport is not None:
            transport.abort()
    elapsed = waited if outcome is Outcome.TIMEOUT else loop.time() - started
    result = ProbeResult(service.name, outcome, status, detail[:200], elapsed)
    result.connected = transport is not None
    if service.probe_query and outcome is Outcome.OK:
        result.answer, result.cut = answer_body(bytes(exchange.buffer), exchange.truncated)
    return result


async def probe_confirmed(service: Service, ip: str, timeout: float) -> ProbeResult:
    """probe_url for a node that was Online: a second connection inside the deadline.

    The first connection starts now with the whole timeout. If it has not answered
    well by SECOND_CHANCE_AT of the timeout (no answer yet, or a failure), a second
    connection starts with what is left of the same deadline, and the first good
    answer of either counts. A lost SYN, a connection stuck in a full accept queue
    or an exporter restarting cannot take a live node Offline on its own, and a
    node that does not answer at all (down, cut off, unreachable) or refuses still
    costs one timeout: it is Offline in this sweep.

    One case gets longer: a first connection that the node's kernel accepted but
    whose answer is late may wait one more timeout (`answer_grace`). That is what a
    live agent (or our own event loop) too busy to answer in time looks like, and
    the former second round forgave it; an exporter that accepts and never answers
    is therefore Offline after two timeouts. When both connections fail, the first
    one's result is returned: it waited longest, and its detail says how long.

    The first connection runs in this task and the second only exists when needed:
    a live node (nearly every probe) costs one timer more than probe_url, not a task.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    started = loop.time()
    deadline = started + timeout
    second: asyncio.Task[ProbeResult] | None = None
    waiting_for_first = True

    def second_answered(attempt: asyncio.Task[ProbeResult]) -> None:
        # A good second answer ends the first connection's wait at once.
        if waiting_for_first and not attempt.cancelled() and attempt.result().ok:
            task.cancel()

    def open_second() -> None:
        nonlocal second
        second = loop.create_task(probe_url(service, ip, max(0.0, deadline - loop.time())))
        second.add_done_callback(second_answered)

    timer = loop.call_later(timeout * SECOND_CHANCE_AT, open_second)
    try:
        first = await probe_url(service, ip, timeout, answer_grace=timeout)
    except asyncio.CancelledError:
        rescued = (
            second is not None and second.done() and not second.cancelled() and second.result().ok
        )
        # uncancel() says whether someone else cancelled us as well: then we go.
        if not rescued or task.uncancel() > 0:
            if second is not None:
                second.cancel()
            raise
        return _second_chance(second.result(), loop.time() - started)
    finally:
        waiting_for_first = False
        timer.cancel()
    if first.ok:
        if second is not None:
            second.cancel()
            first.attempts = 2
        return first
    if second is None:
        # A fast failure (refused, reset) waits for the second-chance time too: an
        # exporter that is restarting gets a moment, and a refusal is not hammered.
        await asyncio.sleep(max(0.0, started + timeout * SECOND_CHANCE_AT - loop.time()))
        result = await probe_url(service, ip, max(0.0, deadline - loop.time()))
    else:
        result = await second
    if result.ok:
        return _second_chance(result, loop.time() - started)
    first.attempts = 2
    return first


def _second_chance(result: ProbeResult, elapsed: float) -> ProbeResult:
    result.attempts, result.elapsed = 2, elapsed
    return result


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

    Targets marked `confirm` (nodes that were Online) are probed with
    probe_confirmed: a second connection inside the same deadline, so a node that
    died is judged Offline by this sweep one timeout after its probe got its slot,
    not in a round after it. Such a probe may hold two sockets; usable_concurrency
    leaves room for that.
    """
    semaphore = asyncio.Semaphore(max(1, concurrency))
    nodes: list[NodeProbe] = []
    jobs: list[tuple[NodeProbe, Service, bool]] = []
    for target in targets:
        node = NodeProbe(target.node_id, target.ip)
        nodes.append(node)
        jobs.extend(
            (node, service, target.confirm) for service in services_to_probe(target.exporters)
        )

    async def run(node: NodeProbe, service: Service, confirm: bool) -> None:
        probe = probe_confirmed if confirm else probe_url
        async with semaphore:  # the deadline starts only once the slot is ours
            node.results[service.name] = await probe(service, node.ip, timeout)

    await asyncio.gather(*(run(node, service, confirm) for node, service, confirm in jobs))
    if stats is not None:
        stats.confirmed = sum(
            any(result.attempts > 1 for result in node.results.values()) for node in nodes
        )
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
    """`wanted`, but never more sockets than the open-files limit leaves room for.

    A probe of a node that was Online may hold two sockets (probe_confirmed).
    """
    limit = raise_nofile_limit()
    if limit == resource.RLIM_INFINITY:
        return max(1, wanted)
    return max(1, min(wanted, (limit - FD_RESERVE) // 2))


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
