"""The OpenAPI schema is complete and valid, and the docs page is served."""

from __future__ import annotations

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
    assert "cdn" not in html.lower()
