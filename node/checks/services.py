"""Each agent service answers its liveness URL on this node (the table in services.py).

Judged by the master's own probe code (contract.liveness), so a service the check
passes is one the sweep counts as up. First, sys-exporter's program: it is the real
node_exporter, which the process runtime runs from the host's own package.

Where a service is asked depends on whose network namespace the checks run in. `mac
doctor`, the process runtime and host mode's sys-manager share the node's, and ask
`service_host` (127.0.0.1, or MAC_BIND's address). In bridge mode sys-manager's namespace
is its own, where 127.0.0.1 is itself alone: there each service is asked where it answers
from the bridge (`where_to_ask`), by the network of the contract's table
(`Service.network`, which tests/maccli/test_compose_files.py holds to the compose files).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from contract.liveness import check_url, outcome_words
from contract.outcomes import Outcome
from contract.services import SERVICES, AgentNetwork, Service
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, runner
from node.checks.fixes import Mac
from node.checks.network import netns_of_its_own
from node.hardware import detect_gpus
from node.host import INSTALL_FIX, NodeExporterMissing, default_route, find_node_exporter

RESTART_AGENT = Mac(("restart", "agent"))
# This process's own routes: /proc/self is the reader's, whatever procfs the roots name.
OWN_ROUTES = Path("/proc/self/net/route")
VENDOR_WORDS = {"nvidia": "NVIDIA", "amd": "AMD"}
AT_GATEWAY = "the host, at the agent bridge's gateway"


def check_node_exporter(ctx: CheckContext) -> CheckResult:
    """node_exporter is installed where the process runtime runs sys-exporter from the host."""
    title = "node_exporter is installed (sys-exporter)"
    wanted = ctx.extra.get("services")
    if wanted is not None and "sys-exporter" not in wanted:
        return CheckResult("node_exporter", title, CheckStatus.SKIP, "sys-exporter not run here.")
    cfg = config(ctx)
    explicit = cfg.get("MAC_NODE_EXPORTER")
    try:
        program = find_node_exporter(explicit, path=ctx.extra.get("path"))
    except NodeExporterMissing:
        program = None
    if program is None:
        runtime = (cfg.get("MAC_RUNTIME") or "auto").strip().lower()
        if runtime == "docker":
            return CheckResult(
                "node_exporter",
                title,
                CheckStatus.SKIP,
                "not on the host: under MAC_RUNTIME=docker, MAC's image brings it.",
            )
        return CheckResult(
            "node_exporter",
            title,
            CheckStatus.FAIL,
            f"{explicit or 'prometheus-node-exporter'} not found: sys-exporter "
            "(:29101, the master's heartbeat) cannot start without it.",
            f"{INSTALL_FIX}\nmac restart agent",
        )
    version = runner(ctx)([program, "--version"])
    first = (version.stdout or version.stderr).splitlines()[:1]
    found = first[0].strip() if version.returncode == 0 and first else "version unknown"
    return CheckResult("node_exporter", title, CheckStatus.PASS, f"{program}: {found}")


@dataclass(frozen=True)
class Where:
    """Where a service is asked from here: an address and, where it is not the node's own,
    how it was found (for the detail); or why no address could be found."""

    host: str = ""
    how: str = ""
    unknown: str = ""


def resolve(name: str) -> str:
    """The IPv4 address of `name` as this process's resolver gives it (Docker's DNS in a
    container on a Compose network); OSError (socket.gaierror) when it has none."""
    return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]


def resolve_all(
    names: Iterable[str], lookup: Callable[[str], str], deadline: float
) -> dict[str, str | Exception | None]:
    """Each name's address, or what its lookup raised, or None when it had no answer within
    `deadline` seconds. The lookups run at once: Docker's DNS forwards a name it does not
    know (a container that is not running) to the host's resolvers, which may answer late
    or never, and one slow name must not hold up the check of every other service."""
    found: dict[str, str | Exception] = {}

    def one(name: str) -> None:
        try:
            found[name] = lookup(name)
        except Exception as exc:  # told as the reason in the check's detail, never raised
            found[name] = exc

    # Daemon threads: a lookup past the deadline finishes on its own; nothing waits on it.
    threads = {name: threading.Thread(target=one, args=(name,), daemon=True) for name in names}
    for thread in threads.values():
        thread.start()
    end = time.monotonic() + deadline
    for thread in threads.values():
        thread.join(max(0.0, end - time.monotonic()))
    return {name: found.get(name) for name in threads}


def host_from_bridge(ctx: CheckContext) -> Where:
    """The node's address as a container on the agent bridge reaches it: the gateway of
    its own default route (Docker gives the bridge's host-side address). A host-network
    service there answers on it: nic-exporter's container listens on every address of the
    host (MAC_BIND is for the process runtime only), and asked at the bridge's own address
    no DNAT or forwarding is involved, only the host's input."""
    path = Path(ctx.extra.get("route_file", OWN_ROUTES))
    try:
        route = default_route(path.read_text())
    except OSError as exc:
        return Where(unknown=f"cannot read {path} ({exc.strerror or exc})")
    gateway = route.gateway if route else ""
    if not gateway:
        return Where(unknown=f"{path} has no default route, so the host's address is unknown")
    return Where(gateway, AT_GATEWAY)


def where_to_ask(ctx: CheckContext, services: list[Service]) -> dict[str, Where]:
    """Where to ask each service from the namespace the checks run in."""
    if not netns_of_its_own(ctx):
        here = Where(ctx.extra.get("service_host", "127.0.0.1"))
        return {service.name: here for service in services}
    # In bridge mode a bridged service is asked by its Compose service name on the agent
    # bridge, which Docker's DNS resolves to its container: that asks the service itself,
    # as the bridge's neighbours see it. Its published port would be asked through
    # docker-proxy or hairpin DNAT (the engine's userland-proxy setting decides), and
    # hairpin DNAT needs ip_forward, which has a check of its own; the published ports
    # from outside are what the master probes already.
    bridged = [s.name for s in services if s.network == AgentNetwork.BRIDGE]
    deadline = service_timeout(ctx)
    found = resolve_all(bridged, ctx.extra.get("resolve", resolve), deadline)
    where = {name: on_bridge(name, answer, deadline) for name, answer in found.items()}
    hosted = [s.name for s in services if s.name not in where]
    if hosted:
        host = host_from_bridge(ctx)
        where.update((name, host) for name in hosted)
    return where


def on_bridge(name: str, answer: str | Exception | None, deadline: float) -> Where:
    """Where a bridged service is asked, from what the lookup of its name gave."""
    if isinstance(answer, str):
        return Where(answer, f"{name} on the agent bridge")
    if answer is None:
        return Where(unknown=f"its name {name} did not resolve within {deadline:g} s")
    why = getattr(answer, "strerror", None) or answer
    return Where(
        unknown=f"its name {name} does not resolve on the agent bridge ({why}); "
        "Docker's DNS knows it only while its container runs"
    )


def service_timeout(ctx: CheckContext) -> float:
    return float(ctx.extra.get("service_timeout", 3.0))


def unreachable(check_id: str, title: str, service: Service, why: str) -> CheckResult:
    """A service this process cannot ask: not a verdict on the service, so a warning that
    sends the operator to the node's own namespace, where `mac doctor` can ask it."""
    return CheckResult(
        check_id,
        title,
        CheckStatus.WARN,
        f"could not ask {service.name} from sys-manager's network namespace: {why}. "
        f"This says nothing of the service itself; on the host: mac doctor {check_id}",
        f"mac doctor {check_id}",
    )


def no_gpus_to_watch(ctx: CheckContext, services: list[Service]) -> list[CheckResult]:
    """A SKIP for each GPU exporter of a vendor whose GPUs this node does not have (read
    on the PCI bus, as the registration reads them). Under Docker such an exporter is not
    started at all (its Compose profile), so asking it would fail with a fix, `mac restart
    agent`, that can never help; under the process runtime it runs and has nothing to
    watch. Either way the node's GPU health does not depend on it."""
    vendors = {s.gpu_vendor for s in services if s.gpu_vendor}
    if not vendors:
        return []
    here, _ = detect_gpus(ctx.roots)
    return [
        CheckResult(
            f"service:{s.name}",
            f"{s.name} answers on :{config(ctx).service_port(s.name)}",
            CheckStatus.SKIP,
            f"no {VENDOR_WORDS[s.gpu_vendor]} GPU on this node: {s.name} has nothing to "
            "watch here (under Docker it is not started).",
        )
        for s in services
        if s.gpu_vendor and s.gpu_vendor != here
    ]


def service_checks(ctx: CheckContext) -> list[CheckResult]:
    cfg = config(ctx)
    wanted = ctx.extra.get("services")
    services = [s for s in SERVICES if wanted is None or s.name in wanted]
    skipped = {r.id: r for r in no_gpus_to_watch(ctx, services)}
    where = where_to_ask(ctx, [s for s in services if f"service:{s.name}" not in skipped])
    results = []
    for service in services:
        port = cfg.service_port(service.name)
        check_id = f"service:{service.name}"
        title = f"{service.name} answers on :{port}"
        if check_id in skipped:
            results.append(skipped[check_id])
            continue
        asked = where[service.name]
        if asked.unknown:
            results.append(unreachable(check_id, title, service, asked.unknown))
            continue
        url = f"http://{asked.host}:{port}{service.liveness_path}"
        said = f"{url} ({asked.how})" if asked.how else url
        result = check_url(asked.host, port, service.liveness_path, service_timeout(ctx))
        if result.ok:
            results.append(CheckResult(check_id, title, CheckStatus.PASS, f"{said} answered 200"))
            continue
        words = outcome_words(result)
        silent = result.outcome is Outcome.TIMEOUT and not result.connected
        if asked.how == AT_GATEWAY and silent:
            # A connection that never opens at the bridge's gateway is most often the
            # host's firewall dropping what comes from the bridge (ufw's default), not the
            # service; a refusal, or a connection the service then leaves unanswered, is
            # the service's own.
            why = f"{said} did not open a connection within {service_timeout(ctx):g} s"
            results.append(unreachable(check_id, title, service, why))
            continue
        found = words if result.http_status else f"no answer ({words})"
        results.append(
            CheckResult(
                check_id,
                title,
                CheckStatus.FAIL,
                f"{said}: {found}",
                steps=(RESTART_AGENT,),
            )
        )
    return results


service_checks.check_id = "service"  # type: ignore[attr-defined]  # reports service:<name>

CHECKS = (check_node_exporter, service_checks)
