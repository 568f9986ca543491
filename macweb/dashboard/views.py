"""The dashboard's pages and their JSON twins: thin adapters over queries.py and charts.py.

Pages need a logged-in user and redirect to the login page; the JSON endpoints the
page's scripts call answer 401 instead, because a script cannot follow a login form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from contract.drainpolicy import DrainMode
from contract.services import SERVICES
from inventory.choices import GpuVendor, HealthState, NodeStatus, SlurmHold
from inventory.models import Node
from macweb.dashboard import charts, queries, scrapes
from scheduler.jobread import current_jobs
from scraping.engines import scraper_gaps

EVENTS_SHOWN = 100
# What a chart or alerts answer that could not ask its service (503) tells the page.
RETRY_AFTER_SECONDS = 5
# A stand-in id that reverse() fills and the page's script swaps for the real one.
_ID_PLACEHOLDER = 987654321


def _json_error(field: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({field: [message]}, status=status)


def _login_first() -> JsonResponse:
    return _json_error("detail", "log in first (/accounts/login/)", 401)


def _url_template(viewname: str) -> str:
    """The URL of `viewname` for a node, with "{id}" in place of the node's id."""
    return reverse(viewname, args=[_ID_PLACEHOLDER]).replace(str(_ID_PLACEHOLDER), "{id}")


def json_login_required(view: Callable) -> Callable:
    """401 JSON for anonymous callers of a sync JSON endpoint."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return _login_first()
        return view(request, *args, **kwargs)

    return wrapper


def admin_change_url_template() -> str:
    """The Django admin's change URL for a node with "{id}" in place of the id ("" if none)."""
    try:
        return _url_template("admin:inventory_node_change")
    except NoReverseMatch:  # the inventory admin is not registered
        return ""


def canonical_fleet_query(view: Callable) -> Callable:
    """Send a link with the page's old parameter names on to today's (same filter)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        query = queries.legacy_query(request.GET)
        if query is not None:
            return redirect(f"{request.path}?{query.urlencode()}")
        return view(request, *args, **kwargs)

    return wrapper


def _fleet_context(query: queries.FleetQuery) -> dict:
    page = query.page_of_nodes()
    return {
        "counts": queries.fleet_counts(),
        "page": page,
        "rows": queries.with_health_fixes([queries.node_row(node) for node in page.object_list]),
    }


@login_required
@require_GET
@canonical_fleet_query
def fleet(request: HttpRequest) -> HttpResponse:
    """The fleet at a glance: counts, and one page of nodes matching the filters."""
    query = queries.FleetQuery(request.GET)
    context = _fleet_context(query)
    context.update(
        {
            "query": query,
            "selected": query.selected(),
            "statuses": NodeStatus.choices,
            "vendors": GpuVendor.choices,
            "health_states": HealthState.choices,
            "slurm_holds": [choice for choice in SlurmHold.choices if choice[0]],
            "slurm_drain": settings.SLURM_DRAIN != DrainMode.OFF,
            "vocabulary": queries.vocabulary(),
            "live_config": {
                "ws_path": "/ws/fleet/",
                "json_url": reverse("dashboard:fleet-json"),
                "node_url": _url_template("dashboard:node"),
                "admin_url": admin_change_url_template() if request.user.is_staff else "",
            },
            "prev_query": query.as_query(page=context["page"].number - 1),
            "next_query": query.as_query(page=context["page"].number + 1),
            # Scale-out mode: a scraper that is away (MAC_SCRAPE_SHARDS); empty when off.
            "metrics_gaps": scraper_gaps(),
        }
    )
    return render(request, "dashboard/fleet.html", context, status=400 if query.errors else 200)


@json_login_required
@require_GET
@canonical_fleet_query
def fleet_json(request: HttpRequest) -> JsonResponse:
    """The same page of the fleet as JSON: what the page resynchronises from."""
    query = queries.FleetQuery(request.GET)
    if query.errors:
        return JsonResponse(query.errors, status=400)
    context = _fleet_context(query)
    page = context["page"]
    response = JsonResponse(
        {
            "counts": context["counts"],
            "page": page.number,
            "num_pages": page.paginator.num_pages,
            "matching": page.paginator.count,
            "per_page": page.paginator.per_page,
            "nodes": context["rows"],
        }
    )
    response["Cache-Control"] = "no-store"
    return response


def exporter_rows(node: Node) -> list[dict]:
    """Every agent service with what the master knows of it on this node (what
    Prometheus says of its scrape comes later, from node_scrapes)."""
    rows = []
    targets = queries.prometheus_targets(node)
    for service in SERVICES:
        port = node.exporters.get(service.name)
        healthy = node.exporter_health.get(service.name)
        if healthy is True:
            state, words = "up", "answered the last probe"
        elif healthy is False:
            state, words = "down", "did not answer the last probe"
        elif port is not None:
            state, words = "unknown", "registered, not probed yet"
        else:
            state, words = "absent", "the agent did not register it"
        rows.append(
            {
                "name": service.name,
                "port": port if port is not None else service.port,
                "liveness_path": service.liveness_path,
                "network": service.network,
                "state": state,
                "words": words,
                # True/False: listed in / left out of its targets file; None: never listed.
                "target": targets.get(service.name),
            }
        )
    return rows


def gpu_rows_with_jobs(node: Node) -> list[dict]:
    """The node page's GPU rows, each with the Slurm job that holds it now (or None)."""
    rows = queries.gpu_rows(node)
    held = current_jobs([node.pk])
    for row in rows:
        held_now = held.get((node.pk, row["index"]))
        row["job"] = held_now and {
            "job_id": held_now.job.job_id, "shown_id": held_now.job.shown_id,
            "user": held_now.job.user, "since": held_now.since,
        }  # fmt: skip
    return rows


@login_required
@require_GET
def node_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One node: status and why, per-exporter health, history, and its charts."""
    node = get_object_or_404(Node, pk=pk)
    chart_names = ["cpu", "memory"]
    if node.gpu_vendor != GpuVendor.NONE:
        chart_names += ["gpu_util", "gpu_memory", "gpu_temp", "gpu_power", "gpu_errors"]
    chart_names.append("rdma")
    context = {
        "node": node,
        "row": queries.node_row(node),
        "exporters": exporter_rows(node),
        "events": node.events.all()[:EVENTS_SHOWN],
        "gpus": gpu_rows_with_jobs(node),
        "health_fix": queries.health_fix(node),
        "slurm_drain": settings.SLURM_DRAIN != DrainMode.OFF,
        "charts": [charts.CHARTS[name] for name in chart_names],
        "ranges": list(charts.RANGES),
        "vocabulary": queries.vocabulary(),
        "default_range": charts.DEFAULT_RANGE,
        "admin_url": admin_change_url_template().replace("{id}", str(node.pk))
        if request.user.is_staff
        else "",
    }
    return render(request, "dashboard/node.html", context)


@require_GET
def node_gpus(request: HttpRequest, pk: int) -> HttpResponse:
    """The node page's GPU rows alone, as the page renders them, for it to refresh them in
    place: verdicts change with the sweeps, the jobs on the GPUs with Slurm."""
    if not request.user.is_authenticated:
        return _login_first()  # never the login page's HTML in the table
    node = Node.objects.filter(pk=pk).first()
    if node is None:
        return _json_error("node", f"no node with id {pk}", 404)
    response = render(request, "dashboard/_gpu_rows.html", {"gpus": gpu_rows_with_jobs(node)})
    response["Cache-Control"] = "no-store"
    return response


async def node_chart(request: HttpRequest, pk: int, chart: str) -> JsonResponse:
    """One chart's data from Prometheus' query_range, or why there is none."""
    user = await request.auser()
    if not user.is_authenticated:
        return _login_first()
    if request.method != "GET":
        return _json_error("detail", "only GET is allowed here", 405)
    try:
        spec = charts.get_spec(chart)
    except charts.ChartError as exc:
        return _json_error(exc.field, exc.message, 404)
    try:
        range_name = charts.parse_range(request.GET.get("range"))
    except charts.ChartError as exc:
        return _json_error(exc.field, exc.message, 400)
    try:
        node = await Node.objects.aget(pk=pk)
    except Node.DoesNotExist:
        return _json_error("node", f"no node with id {pk}", 404)
    answer = await charts.chart_data(node, spec, range_name)
    response = JsonResponse(answer, status=200 if answer["available"] else 503)
    if not answer["available"]:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


async def node_scrapes(request: HttpRequest, pk: int) -> JsonResponse:
    """Prometheus' own health of the node's scrape targets (macweb.dashboard.scrapes),
    asked by the node page once drawn, on the event loop like the charts."""
    user = await request.auser()
    if not user.is_authenticated:
        return _login_first()
    if request.method != "GET":
        return _json_error("detail", "only GET is allowed here", 405)
    if not await Node.objects.filter(pk=pk).aexists():
        return _json_error("node", f"no node with id {pk}", 404)
    scraped = await scrapes.scrape_health(pk)
    response = JsonResponse(
        {"jobs": scraped.jobs, "error": scraped.error, "available": scraped.available},
        status=200 if scraped.available else 503,
    )
    if not scraped.available:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response
