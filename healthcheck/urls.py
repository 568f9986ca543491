"""Root-level routes of the healthcheck app."""

from django.urls import path

from healthcheck import httpsd, views

urlpatterns = [
    path("health", views.health, name="health"),
    path("metrics", views.metrics, name="metrics"),
    path("api/v1/sd/<str:service>", httpsd.http_sd, name="http-sd"),
]
