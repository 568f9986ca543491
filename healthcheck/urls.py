"""Root-level routes of the healthcheck app."""

from django.urls import path

from healthcheck import views

urlpatterns = [
    path("health", views.health, name="health"),
    path("metrics", views.metrics, name="metrics"),
]
