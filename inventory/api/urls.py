"""Routes of the nodes API under /api/v1/: agent endpoints and the nodes viewset."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from inventory.api import faults, maintenance, node_events, node_key, views

router = SimpleRouter()
router.register("nodes", views.NodeViewSet, basename="node")

urlpatterns = [
    path("register", views.RegisterView.as_view(), name="register"),
    path("deregister", views.DeregisterView.as_view(), name="deregister"),
    path("self", views.SelfView.as_view(), name="self"),
    path("nodes/self/events", node_events.node_self_events, name="node-self-events"),
    path(
        "nodes/<int:pk>/maintenance",
        maintenance.NodeMaintenanceView.as_view(),
        name="node-maintenance",
    ),
    path("nodes/<int:pk>/reset-key", node_key.NodeKeyResetView.as_view(), name="node-reset-key"),
    path(
        "nodes/<int:pk>/gpus/<int:index>/faults",
        faults.GpuFaultsView.as_view(),
        name="gpu-faults",
    ),
    *router.urls,
]
