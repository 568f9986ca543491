"""sys-manager: the node's own diagnosis, served to the master.

``GET /diagnostics`` runs the troubleshooting guide's checks (the same functions
``mac doctor`` runs, from ``node.checks``) and answers
``{"ok": bool, "checks": [CheckResult.to_dict(), ...]}``; ``ok`` is false when any
check failed. ``/metrics`` exposes the latest results as
``mac_node_check_status{check,status}`` so Prometheus can alert on them.

It also watches net.ipv4.ip_forward (exporters.ipforward: `mac_ipforward_*`), sets it
back at once with MAC_IPFORWARD_REASSERT=1, and reports every reset to the master
(exporters.ipforward_report), where it shows in the node's history. In bridge mode
sys-manager's network namespace is not the node's: the watch and the checks are told
so, and read the node's flag and nothing of its own namespace's; the service checks ask
the bridged services by name on the agent bridge and nic-exporter at the host's address
there, never 127.0.0.1, which is sys-manager's own loopback alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric

from contract.master_api import MasterClient
from contract.services import AgentNetwork
from exporters.ipforward import IpForwardWatch
from exporters.ipforward_report import ResetReporter
from exporters.runtime import Exporter, Options
from node.checks import CheckContext, CheckResult, CheckStatus, run_checks
from node.checks.network import PROC_FILE, netns_differs
from node.config import ConfigError, node_config
from node.host import Roots

log = logging.getLogger("exporters")

METRICS_MAX_AGE_SECONDS = 30.0


def check_context(roots: Roots, netns_of_its_own: bool = False) -> CheckContext:
    """The checks read the same (possibly redirected) host paths as the exporters, and
    know when sys-manager's network namespace is not the node's: the service checks then
    ask each service where it answers from there (node.checks.services.where_to_ask).

    The node's settings as the exporters read them (node_config): in a container, the
    host's per-node file, where MASTER_IP and the node's ports are; the container's own
    /etc/mango/mac/env does not exist. Not gpu_backends: every GET of the GPU exporter
    runs all its collectors (shortening its NVLink and profiling windows), and its
    backends are on its own page already, which Prometheus scrapes."""
    return CheckContext(
        roots=roots,
        extra={
            "config": node_config(roots),
            "netns_of_its_own": netns_of_its_own,
            "skip": {"gpu_backends"},
        },
    )


def container_network(roots: Roots) -> str | None:
    """The agent's network mode where sys-manager runs in a container (it reads the host
    under /host/root); None under the process runtime."""
    if roots.rootfs == "/":
        return None
    return node_config(roots).value_or_default("MAC_AGENT_NETWORK", log.error)


def netns_of_its_own(roots: Roots, network: str | None) -> bool:
    """Whether sys-manager's network namespace is not the node's: a container on the bridge,
    or one the kernel shows in a namespace other than the host's pid 1's. Under the process
    runtime the namespace sys-manager runs in is the node's by definition."""
    if network is None:
        return False
    return network == AgentNetwork.BRIDGE or bool(netns_differs(roots))


def master_client(roots: Roots) -> MasterClient | None:
    """A client of the master with this node's key, or None before registration."""
    cfg = node_config(roots)
    try:
        url, pin = cfg.master_url, cfg.master_ca_pin
    except ConfigError:
        return None
    if not cfg.master_ip or not cfg.node_key:
        return None
    return MasterClient(url, timeout=5.0, node_key=cfg.node_key, ca_pin=pin)


def ipforward_watch(
    options: Options, report: ResetReporter, network: str | None, own_netns: bool
) -> IpForwardWatch:
    """The watch as the node's settings ask: MAC_IPFORWARD_REASSERT, MAC_IPFORWARD_INTERVAL.

    `network` is the agent's mode in a container (None under the process runtime);
    `own_netns` whether sys-manager's network namespace is not the node's.
    """
    cfg = node_config(options.roots)
    journal = options.roots.host("/var/log/journal")
    return IpForwardWatch(
        options.roots,
        reassert=cfg.value_or_default("MAC_IPFORWARD_REASSERT", log.error),
        reassert_problem=reassert_problem(
            options.roots.host(PROC_FILE),
            AgentNetwork.BRIDGE if own_netns else network,
        ),
        interval=cfg.value_or_default("MAC_IPFORWARD_INTERVAL", log.error),
        on_reset=report.add,
        # In a container the host's persistent journal is read from its files.
        journal_dir=str(journal) if network is not None and journal.is_dir() else None,
        netns_of_its_own=own_netns,
    )


def reassert_problem(path: Path, container_network: str | None) -> str:
    """Why sys-manager cannot set ip_forward back here; "" where it can.

    ``container_network`` is the agent's mode when sys-manager runs in a container
    (None under the process runtime).
    """
    if container_network == AgentNetwork.BRIDGE:
        return (
            "in bridge mode sys-manager has a network namespace of its own: it reads the "
            "node's ip_forward, but a write would change only its own. Run the agent in "
            "host mode: sudo mac start agent --network host"
        )
    if not os.access(path, os.W_OK):
        how = (
            "host mode's compose file mounts it read-write: sudo mac start agent --network host"
            if container_network is not None
            else "run the agent as root: sudo mac restart agent"
        )
        return f"{path} is not writable by sys-manager; {how}"
    return ""


def diagnosis(results: list[CheckResult]) -> dict:
    """The /diagnostics body: ok unless a check failed (warnings do not make it false)."""
    return {
        "ok": not any(result.status == CheckStatus.FAIL for result in results),
        "checks": [result.to_dict() for result in results],
    }


class ChecksSource:
    """Runs the checks (fresh for /diagnostics, at most 30 s old for /metrics)."""

    name = "checks"

    def __init__(self, ctx: CheckContext, runner: Callable[[CheckContext], list] = run_checks):
        self.ctx = ctx
        self.runner = runner
        self._lock = threading.Lock()
        self._last: tuple[float, list[CheckResult]] | None = None

    def run(self) -> list[CheckResult]:
        results = self.runner(self.ctx)
        with self._lock:
            self._last = (time.monotonic(), results)
        return results

    def latest(self) -> list[CheckResult]:
        with self._lock:
            last = self._last
        if last is None or time.monotonic() - last[0] > METRICS_MAX_AGE_SECONDS:
            return self.run()
        return last[1]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "mac_node_check_status",
            "1 for the outcome (pass, warn, fail, skip) of each troubleshooting check.",
            labels=["check", "status"],
        )
        for result in self.latest():
            for status in CheckStatus:
                family.add_metric(
                    [result.id, status.value], 1.0 if result.status == status else 0.0
                )
        yield family


def diagnostics_answer(source: ChecksSource) -> tuple[int, dict]:
    """(HTTP status, body) for /diagnostics; a crash of the checks is a 503 that says so."""
    try:
        return 200, diagnosis(source.run())
    except Exception as exc:  # the master shows this text; a bare 500 would tell nothing
        log.exception("the checks failed")
        return 503, {"ok": False, "checks": [], "error": f"the checks failed: {exc!r}"}


def build(
    options: Options, runner: Callable[[CheckContext], list[CheckResult]] = run_checks
) -> Exporter:
    network = container_network(options.roots)
    own_netns = netns_of_its_own(options.roots, network)
    source = ChecksSource(check_context(options.roots, own_netns), runner=runner)
    report = ResetReporter(lambda: master_client(options.roots)).start()
    watch = ipforward_watch(options, report, network, own_netns).start()

    async def diagnostics(_request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        status, body = await loop.run_in_executor(None, diagnostics_answer, source)
        return web.json_response(body, status=status)

    return Exporter(
        "sys-manager",
        [source, watch, report],
        # The checks probe the master and local services: give them more than a file read.
        timeout=max(options.timeout, 10.0),
        routes=[web.get("/diagnostics", diagnostics)],
    )
