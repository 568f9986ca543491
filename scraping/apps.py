"""The scraping app: the targets, Prometheus's configuration and rules, http_sd and the
scale-out engines. It has no models."""

from django.apps import AppConfig


class ScrapingConfig(AppConfig):
    name = "scraping"
    verbose_name = "Scraping"
