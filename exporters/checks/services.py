"""Each agent service answers its liveness URL on this node (the table in services.py).

Judged by the master's own probe code (contract.liveness), so a service the check
passes is one the sweep counts as up.
"""

from __future__ import annotations

from contract.liveness import check_url, outcome_words
from contract.services import SERVICES
from exporters.checks import CheckContext, CheckResult, CheckStatus
from exporters.checks.base import config


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
                "mac status\nmac restart agent",
            )
        )
    return results


CHECKS = (service_checks,)
