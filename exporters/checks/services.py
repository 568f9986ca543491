"""Each agent service answers its liveness URL on this node (the table in services.py)."""

from __future__ import annotations

from contract.services import SERVICES
from exporters.checks import CheckContext, CheckResult, CheckStatus
from exporters.checks.base import config, http_status


def service_checks(ctx: CheckContext) -> list[CheckResult]:
    cfg = config(ctx)
    host = ctx.extra.get("service_host", "127.0.0.1")
    wanted = ctx.extra.get("services")
    results = []
    for service in SERVICES:
        if wanted is not None and service.name not in wanted:
            continue
        port = cfg.service_port(service.name, service.port)
        url = f"http://{host}:{port}{service.liveness_path}"
        status, body = http_status(url, float(ctx.extra.get("service_timeout", 3.0)))
        check_id = f"service:{service.name}"
        title = f"{service.name} answers on :{port}"
        if status == 200:
            results.append(CheckResult(check_id, title, CheckStatus.PASS, f"{url} answered 200"))
            continue
        found = f"HTTP {status}" if status else f"no answer ({body})"
        results.append(
            CheckResult(
                check_id,
                title,
                CheckStatus.FAIL,
                f"{url}: {found}",
                "mac status\nmac restart agent",
            )
        )
    return results


CHECKS = (service_checks,)
