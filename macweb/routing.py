"""WebSocket routes of the master (the dashboard's live feed)."""

websocket_urlpatterns: list = []
