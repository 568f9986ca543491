"""The node page's charts: one PromQL query set per chart, run through query_range.

The browser never talks to Prometheus: it asks /nodes/<id>/charts/<chart>.json and
this module picks the queries for the node's GPU vendor, filters them by the
`node` label (the node's id) that scraping.targets puts on every target, calls Prometheus with a
short timeout and answers with columns uPlot draws as they are. When there is
nothing to draw the answer says why in words (no such exporter on this node,
Prometheus unreachable, no samples yet), so an empty chart is never a mystery.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import aiohttp
from django.conf import settings

from alerting import bulkheads
from contract.redact import redact, url_secrets, url_without_credentials
from inventory.choices import GpuVendor, NodeStatus
from inventory.models import Node

# Range name -> (seconds, step seconds). About 240-340 points per chart whatever the range.
RANGES: dict[str, tuple[int, int]] = {
    "1h": (3600, 15),
    "24h": (86400, 300),
    "7d": (7 * 86400, 1800),
}
DEFAULT_RANGE = "1h"
# Labels that name a GPU: one line per GPU, called by its index.
GPU_LABELS = ("gpu", "gpu_id")
# Labels that say nothing about which line a series is (identity, placement, vendor).
IGNORED_LABELS = frozenset(
    {"__name__", "instance", "job", "node", "gpu_vendor", "vendor", "iface", "hostname"}
    | {"cluster_name", "maintenance"}  # every target's own labels (scraping.targets)
    | {"Hostname", "UUID", "modelName", "pci_bus_id", "DCGM_FI_DRIVER_VERSION", "device"}
    | {"serial_number", "card_model", "card_vendor"}
)


class ChartError(ValueError):
    """A chart request the endpoint answers with 400/404; `field` names the parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Query:
    """One PromQL expression; `{sel}` is the node selector, `{win}` the rate window."""

    expr: str
    legend: str  # prefix for the series name, e.g. "rx"


@dataclass(frozen=True)
class ChartSpec:
    """A chart: its queries per GPU vendor (key None = any vendor) and the exporter it needs."""

    name: str
    title: str
    unit: str
    queries: dict[str | None, tuple[Query, ...]]
    exporter: dict[str | None, str]


def _gpu(name: str, title: str, unit: str, nvidia: str, amd: str) -> ChartSpec:
    """A per-GPU chart: dcgm-exporter's metric on NVIDIA nodes, rocm-exporter's on AMD."""
    return ChartSpec(
        name=name,
        title=title,
        unit=unit,
        queries={
            GpuVendor.NVIDIA: (Query(nvidia + "{{{sel}}}", "GPU"),),
            GpuVendor.AMD: (Query(amd + "{{{sel}}}", "GPU"),),
        },
        exporter={GpuVendor.NVIDIA: "dcgm-exporter", GpuVendor.AMD: "rocm-exporter"},
    )


CHARTS: dict[str, ChartSpec] = {
    spec.name: spec
    for spec in (
        ChartSpec(
            name="cpu",
            title="CPU busy",
            unit="%",
            queries={
                None: (
                    Query(
                        '100 * (1 - avg(rate(node_cpu_seconds_total{{mode="idle",{sel}}}[{win}])))',
                        "busy",
                    ),
                )
            },
            exporter={None: "sys-exporter"},
        ),
        ChartSpec(
            name="memory",
            title="Memory used",
            unit="%",
            queries={
                None: (
                    Query(
                        "100 * (1 - sum(node_memory_MemAvailable_bytes{{{sel}}})"
                        " / sum(node_memory_MemTotal_bytes{{{sel}}}))",
                        "used",
                    ),
                )
            },
            exporter={None: "sys-exporter"},
        ),
        _gpu("gpu_util", "GPU utilisation", "%", "DCGM_FI_DEV_GPU_UTIL", "gpu_gfx_activity"),
        # dcgm reports framebuffer MiB; AMD's exporter reports VRAM in MB of 2**20 bytes.
        _gpu("gpu_memory", "GPU memory used", "MiB", "DCGM_FI_DEV_FB_USED", "gpu_used_vram"),
        # AMD: the hotspot where the card reports one, else the edge sensor.
        ChartSpec(
            name="gpu_temp",
            title="GPU temperature",
            unit="°C",
            queries={
                GpuVendor.NVIDIA: (Query("DCGM_FI_DEV_GPU_TEMP{{{sel}}}", "GPU"),),
                GpuVendor.AMD: (
                    Query(
                        "gpu_junction_temperature{{{sel}}} or gpu_edge_temperature{{{sel}}}", "GPU"
                    ),
                ),
            },
            exporter={GpuVendor.NVIDIA: "dcgm-exporter", GpuVendor.AMD: "rocm-exporter"},
        ),
        _gpu("gpu_power", "GPU power", "W", "DCGM_FI_DEV_POWER_USAGE", "gpu_power_usage"),
        # Errors per step in one vocabulary: uncorrectable ECC on both vendors (dcgm's
        # double-bit counter, AMD's uncorrectable total, a gauge hence delta), and the
        # XID events dcgm-exporter counts (AMD has no XIDs).
        ChartSpec(
            name="gpu_errors",
            title="GPU errors (XID, uncorrectable ECC)",
            unit="errors",
            queries={
                GpuVendor.NVIDIA: (
                    Query(
                        "sum by (gpu) (increase(DCGM_EXP_XID_ERRORS_COUNT{{{sel}}}[{win}]))",
                        "XID, GPU",
                    ),
                    Query("increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{sel}}}[{win}])", "ECC, GPU"),
                ),
                GpuVendor.AMD: (
                    Query("delta(gpu_ecc_uncorrect_total{{{sel}}}[{win}])", "ECC, GPU"),
                ),
            },
            exporter={GpuVendor.NVIDIA: "dcgm-exporter", GpuVendor.AMD: "rocm-exporter"},
        ),
        ChartSpec(
            name="rdma",
            title="RDMA bandwidth",
            unit="B/s",
            queries={
                None: (
                    Query("rate(rdma_rx_bytes_total{{{sel}}}[{win}])", "rx"),
                    Query("rate(rdma_tx_bytes_total{{{sel}}}[{win}])", "tx"),
                )
            },
            exporter={None: "nic-exporter"},
        ),
    )
}


def parse_range(raw: str | None) -> str:
    """The range name, defaulting to 1h; ChartError naming `range` otherwise."""
    value = (raw or DEFAULT_RANGE).strip()
    if value not in RANGES:
        raise ChartError("range", f"must be one of {', '.join(RANGES)}")
    return value


def get_spec(name: str) -> ChartSpec:
    try:
        return CHARTS[name]
    except KeyError:
        raise ChartError("chart", f"no chart named {name!r}; charts: {', '.join(CHARTS)}") from None


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal (hostnames are safe, but never trust that)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def node_selector(node: Node) -> str:
    """The label matcher that picks a node's series.

    scraping.targets labels every target with node="<Node id>" (and hostname=...);
    the id survives a hostname change, so the charts follow it.
    """
    return f"node={promql_string(str(node.pk))}"


def rate_window(step: int) -> str:
    """Wide enough for at least a few scrapes at any step (a rate needs two samples)."""
    return f"{max(4 * step, 60)}s"


def queries_for(spec: ChartSpec, node: Node, step: int) -> tuple[tuple[Query, ...], str | None]:
    """(queries with the node filled in, exporter name) for this node's vendor."""
    key: str | None = None if None in spec.queries else node.gpu_vendor
    templates = spec.queries.get(key, ())
    sel, win = node_selector(node), rate_window(step)
    filled = tuple(Query(q.expr.format(sel=sel, win=win), q.legend) for q in templates)
    return filled, spec.exporter.get(key)


def no_exporter_reason(spec: ChartSpec, node: Node) -> str | None:
    """Why this node cannot have this chart at all, or None when it can."""
    if None not in spec.queries and node.gpu_vendor not in spec.queries:
        return (
            f"{node.hostname} reports no GPUs (GPU vendor: {node.get_gpu_vendor_display()}), "
            "so there is no GPU exporter to chart."
        )
    _, exporter = queries_for(spec, node, 60)
    if node.exporters and exporter not in node.exporters:
        return (
            f"{node.hostname} did not register a {exporter}, so there is nothing to chart; "
            f"start it on the node (mac restart agent) if it should run there."
        )
    return None


def series_name(legend: str, metric: dict) -> str:
    """A short line name: "GPU 3" for a GPU, else the labels that tell series apart."""
    for key in GPU_LABELS:
        if key in metric:
            return f"{legend} {metric[key]}"
    parts = [f"{k}={v}" for k, v in sorted(metric.items()) if k not in IGNORED_LABELS]
    if "device" in metric:  # an RDMA device: "rx mlx5_0 port=1"
        parts.insert(0, metric["device"])
    elif "iface" in metric:  # a NIC without a verbs device (GPUBoost): "rx eth2 port=1"
        parts.insert(0, metric["iface"])
    return " ".join([legend, *parts])


def build_columns(
    results: list[tuple[Query, list[dict]]], start: float, end: float, step: int
) -> tuple[list[float], list[dict]]:
    """Align every series (as matrix() checked it) on Prometheus' own evaluation grid
    (start + k*step <= end)."""
    count = int((end - start) // step) + 1
    grid = [start + k * step for k in range(count)]
    series = []
    for query, result in results:
        for item in result:
            by_slot: dict[int, float] = {}
            for ts, value in item["values"]:
                if math.isfinite(value):
                    by_slot[round((ts - start) / step)] = value
            values = [by_slot.get(k) for k in range(count)]
            series.append({"label": series_name(query.legend, item["metric"]), "values": values})
    series.sort(key=lambda s: s["label"])
    return grid, series


async def _query_range(
    session: aiohttp.ClientSession, base: str, expr: str, start: float, end: float, step: int
) -> list[dict]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
    async with session.get(f"{base}/api/v1/query_range", params=params) as resp:
        try:
            body, is_json = await resp.json(content_type=None), True
        except (ValueError, aiohttp.ContentTypeError):
            body, is_json = None, False
        error = body if isinstance(body, dict) and body.get("status") == "error" else {}
        if resp.status in UNAVAILABLE_STATUSES:
            why = f": {error.get('errorType')}: {error.get('error', '')}" if error else ""
            raise PrometheusUnavailable(f"could not answer now (HTTP {resp.status}{why})")
        if not is_json:
            raise PrometheusError(f"answered HTTP {resp.status} without JSON")
        if resp.status != 200 or error:
            kind = error.get("errorType", resp.status)
            raise PrometheusError(f"rejected the query ({kind}: {error.get('error', '')})")
        return matrix(body)


def matrix(body: object) -> list[dict]:
    """query_range's answer checked, each sample as two floats: [{"metric": {label: text},
    "values": [(time, value), ...]}]. PrometheusError for anything else (a store, or what
    answers in its place, saying 200 with null, no data, or a value "x")."""
    if not isinstance(body, dict) or body.get("status") != "success":
        raise PrometheusError("answered without the expected data (no success status)")
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise PrometheusError("answered without the expected data (no result list)")
    series = []
    try:
        for item in result:
            metric = item.get("metric", {})
            if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
                raise TypeError(f"labels that are not text: {metric!r}"[:200])
            values = [(float(ts), float(raw)) for ts, raw in item.get("values", [])]
            if not all(math.isfinite(ts) for ts, _ in values):
                raise ValueError("a sample time that is not a number")
            series.append({"metric": metric, "values": values})
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise PrometheusError(f"answered without the expected data ({exc})") from None
    return series


class PrometheusError(RuntimeError):
    """Prometheus answered, but not with data."""


class PrometheusUnavailable(PrometheusError):
    """Prometheus, or the proxy before it, could not answer now (its query timed out, or
    it is down behind the proxy): as when it cannot be reached, the endpoint answers 503."""


# The store's own "timeout"/"unavailable" (503) and a proxy's bad gateway or timeout.
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


def store_said(base: str, what: str, *also: str) -> str:
    """The words "Prometheus at <base> <what>" as people may read them: a site's Prometheus
    (or store) behind basic auth has its password in MAC_PROMETHEUS_URL, and neither the
    URL nor an error quoting it (or quoting one of `also`'s URLs) shows that password."""
    secrets = [secret for url in (base, *also) for secret in url_secrets(url)]
    return redact(f"Prometheus at {url_without_credentials(base)} {what}", secrets)


async def chart_data(
    node: Node, spec: ChartSpec, range_name: str, now: float | None = None
) -> dict:
    """The chart's JSON: columns for uPlot, or an empty chart with `empty_reason`."""
    seconds, step = RANGES[range_name]
    end = time.time() if now is None else now
    start = end - seconds
    queries, exporter = queries_for(spec, node, step)
    answer = {
        "chart": spec.name,
        "title": spec.title,
        "unit": spec.unit,
        "range": range_name,
        "step": step,
        "exporter": exporter,
        "queries": [q.expr for q in queries],
        "timestamps": [],
        "series": [],
        "empty_reason": None,
        # False when Prometheus could not be asked in time (the endpoint answers 503).
        "available": True,
    }
    reason = no_exporter_reason(spec, node)
    if reason:
        answer["empty_reason"] = reason
        return answer
    base = settings.PROMETHEUS_URL.rstrip("/")
    deadline = settings.DASHBOARD_PROMETHEUS_TIMEOUT
    timeout = aiohttp.ClientTimeout(total=deadline)
    try:
        with bulkheads.PROMETHEUS.slot():
            async with aiohttp.ClientSession(timeout=timeout) as session:
                results = await asyncio.gather(
                    *(_query_range(session, base, q.expr, start, end, step) for q in queries)
                )
    except bulkheads.BulkheadFull as exc:
        answer["available"] = False
        answer["empty_reason"] = f"Not asked: {exc}."
        return answer
    except PrometheusUnavailable as exc:
        answer["available"] = False
        answer["empty_reason"] = store_said(base, f"{exc}.")
        return answer
    except PrometheusError as exc:
        answer["empty_reason"] = store_said(base, str(exc))
        return answer
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        what = (
            f"did not answer within {deadline:g} s (MAC_DASHBOARD_PROMETHEUS_TIMEOUT)"
            if isinstance(exc, TimeoutError)
            else f"is unreachable ({exc})"
        )
        answer["available"] = False
        answer["empty_reason"] = store_said(
            base,
            f"{what}. Check that mac-prometheus runs on the master "
            f"(mac status master) and that MAC_PROMETHEUS_URL points at it.",
        )
        return answer
    grid, series = build_columns(list(zip(queries, results, strict=True)), start, end, step)
    if not any(v is not None for s in series for v in s["values"]):
        answer["empty_reason"] = empty_data_reason(node, exporter, range_name)
        return answer
    answer["timestamps"] = grid
    answer["series"] = series
    return answer


def empty_data_reason(node: Node, exporter: str | None, range_name: str) -> str:
    """Why Prometheus has no samples for this node although it answered."""
    # An Offline node keeps each exporter that still answers (nic-exporter under
    # ip_forward=0) among Prometheus' targets: only the silent ones were dropped.
    if node.status == NodeStatus.OFFLINE and node.exporter_health.get(exporter) is not True:
        return (
            f"No samples in the last {range_name}: {node.hostname} is offline, so its "
            f"{exporter} target was dropped from Prometheus. See the diagnosis above."
        )
    if node.exporter_health.get(exporter) is False:
        return (
            f"No samples in the last {range_name}: the last probe of {exporter} on "
            f"{node.hostname} failed, so Prometheus cannot scrape it."
        )
    return (
        f"No data yet: Prometheus has no samples from {exporter} on {node.hostname} in the "
        f"last {range_name}. A new target needs a scrape or two; check its health at "
        "/api/v1/targets on Prometheus."
    )
