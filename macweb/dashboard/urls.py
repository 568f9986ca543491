"""Routes of the web dashboard."""

urlpatterns: list = []
