"""The dashboard's alerts and maintenance: JSON from Alertmanager, and the maintenance switch.

The pages load without Alertmanager: their scripts ask these endpoints, which answer
`{"available": false, "error": "<why>"}` when it is down, so the page says "alerts
unavailable: <why>" in the alerts panel and everything else keeps working. Live
changes arrive over the page's one WebSocket (alerting.tasks pushes them).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_GET, require_POST

from alerting.queries import firing_alerts, node_alerts
from inventory import services
from inventory.models import Node
from macweb.dashboard.views import json_login_required


def _no_store(data: dict) -> JsonResponse:
    response = JsonResponse(data)
    response["Cache-Control"] = "no-store"
    return response


@json_login_required
@require_GET
def fleet_alerts_json(request: HttpRequest) -> JsonResponse:
    """The fleet's firing alerts: count, list, or why they are unavailable."""
    return _no_store(firing_alerts().as_dict())


@json_login_required
@require_GET
def node_alerts_json(request: HttpRequest, pk: int) -> JsonResponse:
    """One node's firing alerts and the silences on it."""
    node = Node.objects.filter(pk=pk).only("pk").first()
    if node is None:
        return JsonResponse({"node": [f"no node with id {pk}"]}, status=404)
    return _no_store(node_alerts(node.pk))


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
    services.set_maintenance(node, wanted == "on", actor=actor)
    return redirect("dashboard:node", pk=node.pk)
