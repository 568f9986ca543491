"""Root-level routes of the scraping app."""

from django.urls import path

from scraping import httpsd

urlpatterns = [
    path("api/v1/sd/<str:service>", httpsd.http_sd, name="http-sd"),
]
