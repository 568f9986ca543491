"""Routes of the nodes API under /api/v1/."""

urlpatterns: list = []
