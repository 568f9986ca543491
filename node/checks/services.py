"""Each agent service answers its liveness URL on this node (the table in services.py).

Judged by the master's own probe code (contract.liveness), so a service the check
passes is one the sweep counts as up. First, sys-exporter's program: it is the real
node_exporter, which the process runtime runs from the host's own package.
"""

from __future__ import annotations

from contract.liveness import check_url, outcome_words
from contract.services import SERVICES
from node.checks.base import CheckContext, CheckResult, CheckStatus, config, runner
from node.checks.fixes import Mac
from node.host import INSTALL_FIX, NodeExporterMissing, find_node_exporter

RESTART_AGENT = Mac(("restart", "agent"))


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


def service_checks(ctx: CheckContext) -> list[CheckResult]:
    cfg = config(ctx)
    host = ctx.extra.get("service_host", "127.0.0.1")
    wanted = ctx.extra.get("services")
    results = []
    for service in SERVICES:
        if wanted is not None and service.name not in wanted:
            continue
        port = cfg.service_port(service.name)
        url = f"http://{host}:{port}{service.liveness_path}"
        result = check_url(
            host, port, service.liveness_path, float(ctx.extra.get("service_timeout", 3.0))
        )
        check_id = f"service:{service.name}"
        title = f"{service.name} answers on :{port}"
        if result.ok:
            results.append(CheckResult(check_id, title, CheckStatus.PASS, f"{url} answered 200"))
            continue
        words = outcome_words(result)
        found = words if result.http_status else f"no answer ({words})"
        results.append(
            CheckResult(
                check_id,
                title,
                CheckStatus.FAIL,
                f"{url}: {found}",
                steps=(RESTART_AGENT,),
            )
        )
    return results


service_checks.check_id = "service"  # type: ignore[attr-defined]  # reports service:<name>

CHECKS = (check_node_exporter, service_checks)
