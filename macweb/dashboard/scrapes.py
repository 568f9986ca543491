"""Prometheus' own word on a node's exporters: is each target scraped, and why not.

The node page's Exporters panel shows it beside MAC's probe: an exporter can answer the
probe's liveness URL and still fail Prometheus' scrape (a 404 on /metrics, a page it
cannot parse), which only Prometheus knows. `up{node="<id>"}` says which of the node's
targets are up, one small query however large the fleet; only for a target that is down
does the page ask /api/v1/targets for its last error, limited to that job
(`scrapePool`, Prometheus 2.42 and later), so a 10,000-node fleet's list never travels.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from django.conf import settings

# The page waits at most this long for Prometheus (it renders without the column).
TIMEOUT = 2.0


@dataclass
class ScrapeHealth:
    """{job: {"health": "up" | "down", "error": last scrape error}} or why unknown."""

    jobs: dict[str, dict] = field(default_factory=dict)
    error: str = ""


def _get(path: str, query: dict) -> dict:
    base = settings.PROMETHEUS_URL.rstrip("/")
    url = f"{base}{path}?{urllib.parse.urlencode(query)}"
    timeout = min(TIMEOUT, settings.DASHBOARD_PROMETHEUS_TIMEOUT)
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (settings URL)
        return json.load(response)


def scrape_health(node_id: int) -> ScrapeHealth:
    """Prometheus' health of each of this node's scrape targets, by job."""
    try:
        answer = _get("/api/v1/query", {"query": f'up{{node="{int(node_id)}"}}'})
        jobs = {
            sample["metric"].get("job", ""): {
                "health": "up" if sample["value"][1] == "1" else "down",
                "error": "",
            }
            for sample in answer["data"]["result"]
        }
        for job, health in jobs.items():
            if health["health"] == "down":
                health["error"] = _last_error(job, node_id)
    except (OSError, ValueError, KeyError) as exc:
        words = getattr(exc, "reason", None) or exc
        return ScrapeHealth(
            error=f"Prometheus at {settings.PROMETHEUS_URL} did not answer: {words}"
        )
    return ScrapeHealth(jobs=jobs)


def _last_error(job: str, node_id: int) -> str:
    answer = _get("/api/v1/targets", {"state": "active", "scrapePool": job})
    for target in answer["data"]["activeTargets"]:
        if target.get("labels", {}).get("node") == str(node_id):
            return target.get("lastError", "")
    return ""
