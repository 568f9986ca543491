"""Prometheus' own word on a node's exporters: is each target scraped, and why not.

The node page's Exporters panel shows it beside MAC's probe: an exporter can answer the
probe's liveness URL and still fail Prometheus' scrape (a 404 on /metrics, a page it
cannot parse), which only Prometheus knows. `up{node="<id>"}` says which of the node's
targets are up, one small query however large the fleet; only for a target that is down
does the page ask /api/v1/targets for its last error, limited to that job
(`scrapePool`, Prometheus 2.42 and later), so a 10,000-node fleet's list never travels.

The targets come from settings.TARGETS_URL: Prometheus itself, or in scale-out mode the
merged targets view (scraping.targetsview), since the store that answers `up` knows
no targets. The page asks /nodes/<id>/scrapes.json after it is drawn; that request, like
the charts, waits on the event loop (macweb.asgi) inside the Prometheus bulkhead
(alerting.bulkheads), so a hung Prometheus holds no request thread and never delays
the page.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
from django.conf import settings

from alerting import bulkheads
from contract.redact import url_without_credentials
from macweb.dashboard.charts import store_said

# The most the panel waits for Prometheus (and the targets view) in all.
TIMEOUT = 2.0


@dataclass
class ScrapeHealth:
    """{job: {"health": "up" | "down", "error": last scrape error}} or why unknown.

    `available` is False when Prometheus could not be asked in time (the endpoint then
    answers 503, as a chart does)."""

    jobs: dict[str, dict] = field(default_factory=dict)
    error: str = ""
    available: bool = True


async def _get(session: aiohttp.ClientSession, base: str, path: str, query: dict) -> dict:
    async with session.get(f"{base.rstrip('/')}{path}", params=query) as response:
        if response.status != 200:
            raise ValueError(f"{path} answered HTTP {response.status}")
        return await response.json(content_type=None)


async def _last_error(session: aiohttp.ClientSession, job: str, node_id: int) -> str:
    answer = await _get(
        session, settings.TARGETS_URL, "/api/v1/targets", {"state": "active", "scrapePool": job}
    )
    for target in answer["data"]["activeTargets"]:
        if target.get("labels", {}).get("node") == str(node_id):
            return target.get("lastError", "")
    return ""


async def _ask(node_id: int) -> dict[str, dict]:
    async with aiohttp.ClientSession() as session:
        answer = await _get(
            session, settings.PROMETHEUS_URL, "/api/v1/query", {"query": f'up{{node="{node_id}"}}'}
        )
        jobs = {
            sample["metric"].get("job", ""): {
                "health": "up" if sample["value"][1] == "1" else "down",
                "error": "",
            }
            for sample in answer["data"]["result"]
        }
        down = [job for job, health in jobs.items() if health["health"] == "down"]
        errors = await asyncio.gather(*(_last_error(session, job, node_id) for job in down))
        for job, error in zip(down, errors, strict=True):
            jobs[job]["error"] = error
    return jobs


async def scrape_health(node_id: int) -> ScrapeHealth:
    """Prometheus' health of each of this node's scrape targets, by job."""
    deadline = min(TIMEOUT, settings.DASHBOARD_PROMETHEUS_TIMEOUT)
    where = settings.PROMETHEUS_URL
    try:
        with bulkheads.PROMETHEUS.slot():
            async with asyncio.timeout(deadline):
                return ScrapeHealth(jobs=await _ask(int(node_id)))
    except bulkheads.BulkheadFull as exc:
        return ScrapeHealth(error=f"not asked: {exc}", available=False)
    except TimeoutError:
        why = f"did not answer within {deadline:g} s"
    except (aiohttp.ClientError, OSError) as exc:
        why = f"is unreachable ({exc})"
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        # 200 with anything but the API's shape: a sample's metric as text, an empty value
        why = f"answered without the expected data ({exc})"
    targets = settings.TARGETS_URL
    if where != targets:
        why = f"(targets: {url_without_credentials(targets)}) {why}"
    return ScrapeHealth(error=store_said(where, why, targets), available=False)
