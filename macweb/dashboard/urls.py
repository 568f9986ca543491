"""Routes of the web dashboard (the fleet, a node, their JSON for the page's scripts)."""

from django.urls import path

from macweb.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("fleet.json", views.fleet_json, name="fleet-json"),
    path("nodes/<int:pk>/", views.node_detail, name="node"),
    path("nodes/<int:pk>/charts/<slug:chart>.json", views.node_chart, name="node-chart"),
]
