"""Routes of the web dashboard (the fleet, a node, their JSON for the page's scripts)."""

from django.urls import path

from macweb.dashboard import alerts, jobs, views

app_name = "dashboard"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("fleet.json", views.fleet_json, name="fleet-json"),
    path("nodes/<int:pk>/", views.node_detail, name="node"),
    path("nodes/<int:pk>/charts/<slug:chart>.json", views.node_chart, name="node-chart"),
    path("alerts/", alerts.alerts_page, name="alerts"),
    path("jobs/<int:job_id>/", jobs.job_page, name="job"),
    path("nodes/<int:pk>/scrapes.json", views.node_scrapes, name="node-scrapes"),
    path("nodes/<int:pk>/gpus.html", views.node_gpus, name="node-gpus"),
    path("alerts.json", alerts.fleet_alerts_json, name="alerts-json"),
    path("nodes/<int:pk>/alerts.json", alerts.node_alerts_json, name="node-alerts-json"),
    path("nodes/<int:pk>/maintenance", alerts.node_maintenance, name="node-maintenance"),
]
