"""Values no database can keep, and bodies no parser should recurse into (issue 11, defect 3).

Each is a 400 naming the field, on PostgreSQL and on SQLite (scripts/test runs this
package on both), and nothing is stored; the nodes list refuses such text in its
query parameters the same way.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from inventory.models import Node

pytestmark = pytest.mark.django_db(transaction=True)


def post_raw(text: str):
    return Client().post(
        "/api/v1/register", text, content_type="application/json", REMOTE_ADDR="10.0.0.5"
    )


# Written as JSON text: the escapes reach the server exactly as a hostile agent sends them.
HOSTILE_BODIES = [
    ('{"hostname": "gpu-01", "nics": [{"speed": 1e400}]}', "nics", "out of range"),
    ('{"hostname": "gpu-01", "nics": [{"speed": -1e400}]}', "nics", "out of range"),
    ('{"hostname": "gpu-01", "nics": [{"speed": 1' + "0" * 30 + "}]}", "nics", "out of range"),
    ('{"hostname": "gpu-01", "nics": [{"name": "mlx\\u0000"}]}', "nics", "NUL"),
    ('{"hostname": "gpu-01", "nics": [{"name": "mlx\\ud800"}]}', "nics", "surrogate"),
    ('{"hostname": "gpu-01", "nics": [{"na\\u0000me": "mlx5_0"}]}', "nics", "NUL"),
    ('{"hostname": "gpu-01", "nics": [{"\\udfff": "mlx5_0"}]}', "nics", "surrogate"),
    ('{"hostname": "gpu-01", "labels": {"rack": "a\\u0000"}}', "labels", "Null"),
    ('{"hostname": "gpu-01", "labels": {"rack": "a\\ud800"}}', "labels", "urrogate"),
    ('{"hostname": "gpu-01", "agent_version": "1\\u0000"}', "agent_version", "Null"),
    ('{"hostname": "gpu-01", "machine_id": "\\udbff"}', "machine_id", "urrogate"),
    ('{"hostname": "gpu\\u000001"}', "hostname", "not valid"),
    # the Kelvin sign lowers to "k": refused as not ASCII before it is lowered
    ('{"hostname": "gpu-0\\u212a"}', "hostname", "must be ASCII"),
    # Blanks around a name are refused, as the schema's pattern does, not trimmed away.
    ('{"hostname": " gpu-01"}', "hostname", "not valid"),
    ('{"hostname": "gpu-01\\n"}', "hostname", "not valid"),
    ('{"hostname": "gp\\u00fc-01"}', "hostname", "xn--"),
]


@pytest.mark.parametrize(("text", "field", "needle"), HOSTILE_BODIES)
def test_it_refuses_unstorable_values_naming_the_field(text, field, needle):
    response = post_raw(text)

    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field]
    assert needle in json.dumps(errors, ensure_ascii=False)
    assert not Node.objects.exists()


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_it_refuses_deeply_nested_json_naming_the_body(depth):
    text = '{"hostname": "gpu-01", "nics": ' + "[" * depth + "]" * depth + "}"

    response = post_raw(text)

    assert response.status_code == 400
    assert "nested too deeply" in response.json()["body"][0]


def test_it_refuses_deep_nesting_that_the_parser_survives_naming_the_field():
    text = '{"hostname": "gpu-01", "labels": {"rack": ' + "[" * 500 + "]" * 500 + "}}"

    response = post_raw(text)

    assert response.status_code == 400
    assert list(response.json()) == ["labels"]


def test_ordinary_numbers_in_nics_are_still_accepted():
    text = '{"hostname": "gpu-01", "nics": [{"speed": 400000, "mtu": 9000, "ratio": 0.5}]}'

    response = post_raw(text)

    assert response.status_code == 201, response.content
    assert response.json()["ip"] == "10.0.0.5"


@pytest.mark.parametrize(
    "query",
    [
        {"search": "gpu\x00"},
        {"label": "rack=a\x00"},
        {"ordering": "hostname\x00"},
        {"hostname": "\x00"},
    ],
    ids=["search-nul", "label-nul", "ordering-nul", "unknown-nul"],
)
def test_the_nodes_list_refuses_unstorable_query_text(auth_client, make_node, query):
    make_node("gpu-01")

    response = auth_client.get("/api/v1/nodes/", query)

    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert set(response.json()) <= set(query)
