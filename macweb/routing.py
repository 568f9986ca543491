"""WebSocket routes of the master (the dashboard's live feed)."""

from django.urls import path

from macweb.dashboard.consumers import FleetConsumer

websocket_urlpatterns: list = [
    path("ws/fleet/", FleetConsumer.as_asgi()),
]
