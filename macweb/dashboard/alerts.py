"""The dashboard's alerts and maintenance: JSON from Alertmanager, the Alerts page, and the
maintenance switch.

The pages load without Alertmanager: their scripts ask these endpoints, which answer
`{"available": false, "error": "<why>"}` when it is down, so the page says "alerts
unavailable: <why>" in the alerts panel and everything else keeps working. Live
changes arrive over the page's one WebSocket (alerting.tasks pushes them).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from alerting import bulkheads
from alerting.client import node_of_label
from alerting.queries import alerts_and_silences, firing_alerts, node_alerts
from inventory import services
from inventory.models import Node
from macweb.dashboard.views import RETRY_AFTER_SECONDS, json_login_required


def _no_store(data: dict) -> JsonResponse:
    """The answer; 503 with Retry-After when Alertmanager could not be asked in time."""
    available = data["available"]
    response = JsonResponse(data, status=200 if available else 503)
    if not available:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


def _bulkhead_full(exc: bulkheads.BulkheadFull, **empty) -> JsonResponse:
    return _no_store({"available": False, "error": f"not asked: {exc}", **empty})


@json_login_required
@require_GET
def fleet_alerts_json(request: HttpRequest) -> JsonResponse:
    """The fleet's firing alerts: count, list, or why they are unavailable."""
    try:
        with bulkheads.ALERTMANAGER.slot():
            return _no_store(firing_alerts().as_dict())
    except bulkheads.BulkheadFull as exc:
        return _bulkhead_full(exc, count=0, alerts=[])


@login_required
@require_GET
def alerts_page(request: HttpRequest) -> HttpResponse:
    """Alertmanager's alerts and silences for people: Debian's Alertmanager has no web UI,
    so /alertmanager/ opened in a browser comes here (macweb.nginxconf)."""
    try:
        with bulkheads.ALERTMANAGER.slot():
            data = alerts_and_silences()
    except bulkheads.BulkheadFull as exc:
        data = {"available": False, "error": f"not asked: {exc}", "alerts": [], "silences": []}
    for row in data["alerts"]:
        # A node label that is not one of ours (another system's alert) links nowhere.
        pk = node_of_label(row["node"])
        row["node_url"] = reverse("dashboard:node", args=[pk]) if pk is not None else ""
    status = 200 if data["available"] else 503
    return render(request, "dashboard/alerts.html", {"data": data}, status=status)


@json_login_required
@require_GET
def node_alerts_json(request: HttpRequest, pk: int) -> JsonResponse:
    """One node's firing alerts and the silences on it."""
    node = Node.objects.filter(pk=pk).only("pk").first()
    if node is None:
        return JsonResponse({"node": [f"no node with id {pk}"]}, status=404)
    try:
        with bulkheads.ALERTMANAGER.slot():
            return _no_store(node_alerts(node.pk))
    except bulkheads.BulkheadFull as exc:
        return _bulkhead_full(exc, alerts=[], silences=[])


@login_required
@require_POST
def node_maintenance(request: HttpRequest, pk: int) -> HttpResponse:
    """Staff switch a node's maintenance from its page (MAC then silences its alerts)."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Only staff can change maintenance.")
    node = get_object_or_404(Node, pk=pk)
    wanted = request.POST.get("maintenance")
    if wanted not in {"on", "off"}:
        return JsonResponse({"maintenance": ["must be on or off"]}, status=400)
    actor = f"dashboard:{request.user.get_username()}"
    deferred: list[str] = []
    services.set_maintenance(node, wanted == "on", actor=actor, deferred=deferred)
    for words in deferred:
        messages.warning(request, words[:1].upper() + words[1:] + ".")
    return redirect("dashboard:node", pk=node.pk)
