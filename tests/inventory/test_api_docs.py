"""The OpenAPI schema is complete and valid, and the docs page is served."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
import yaml
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    schema = yaml.safe_load(out.read_text())
    paths = schema["paths"]
    for path in ("/api/v1/register", "/api/v1/deregister", "/api/v1/self", "/api/v1/nodes/"):
        assert path in paths
    register = paths["/api/v1/register"]["post"]
    assert {"200", "201", "400", "401", "403", "429"} <= set(register["responses"])
    assert "joinToken" in schema["components"]["securitySchemes"]
    headers = [p["name"] for p in register["parameters"] if p["in"] == "header"]
    assert headers == ["X-MAC-Node-Key"]


def test_schema_endpoint_serves_the_schema(client):
    response = client.get("/api/v1/schema/", {"format": "json"})

    assert response.status_code == 200
    assert response.json()["info"]["title"] == "MAC master API"


def test_docs_page_is_served_from_local_assets(client):
    response = client.get("/api/v1/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    # Every script and stylesheet comes from this master; the page also carries a
    # random CSRF token, so a plain substring search for "cdn" would flake.
    assets = _asset_urls(html)
    assert any(url.endswith(".js") for url in assets)
    assert all(url.startswith("/") and not url.startswith("//") for url in assets), assets


class _AssetCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.urls.append(value)


def _asset_urls(html: str) -> list[str]:
    collector = _AssetCollector()
    collector.feed(html)
    return collector.urls
