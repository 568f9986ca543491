"""sys-manager: the node's own diagnosis, served to the master.

``GET /diagnostics`` runs the troubleshooting guide's checks (the same functions
``mac doctor`` runs, from ``exporters.checks``) and answers
``{"ok": bool, "checks": [CheckResult.to_dict(), ...]}``; ``ok`` is false when any
check failed. ``/metrics`` exposes the latest results as
``mac_node_check_status{check,status}`` so Prometheus can alert on them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

from aiohttp import web
from prometheus_client.core import GaugeMetricFamily, Metric

from exporters.checks import CheckContext, CheckResult, CheckStatus, run_checks
from exporters.runtime import Exporter, Options, Roots

log = logging.getLogger("exporters")

METRICS_MAX_AGE_SECONDS = 30.0


def check_context(roots: Roots) -> CheckContext:
    """The checks read the same (possibly redirected) host paths as the exporters."""
    return CheckContext(
        proc_root=roots.proc_root,
        sys_root=roots.sys_root,
        dev_root=roots.dev_root,
        etc_root=str(roots.host("/etc")),
    )


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
    source = ChecksSource(check_context(options.roots), runner=runner)

    async def diagnostics(_request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        status, body = await loop.run_in_executor(None, diagnostics_answer, source)
        return web.json_response(body, status=status)

    return Exporter(
        "sys-manager",
        [source],
        # The checks probe the master and local services: give them more than a file read.
        timeout=max(options.timeout, 10.0),
        routes=[web.get("/diagnostics", diagnostics)],
    )
