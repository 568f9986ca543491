"""The inventory: nodes and their events, registration and dedupe, the API, admin and live push."""
