"""Registration security: join token, claimed addresses, proxies, rate limit, CSRF, bad input."""

from __future__ import annotations

import ipaddress
import json

import pytest
from django.test import Client

from inventory.models import Node
from inventory.services.keys import node_key_matches
from testkit.ports import free_port

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-join-token-for-tests"


@pytest.fixture
def join_token(settings):
    settings.JOIN_TOKEN = TOKEN
    return TOKEN


# --- Join token ------------------------------------------------------------------------


def test_join_token_required_when_set(register, join_token):
    response = register("gpu-01")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "MAC_JOIN_TOKEN" in response.json()["detail"]
    assert not Node.objects.exists()


@pytest.mark.parametrize("header", ["Bearer wrong-token", "Bearer ", "Basic abc", "Token " + TOKEN])
def test_wrong_or_malformed_join_token_is_refused(api_client, join_token, header):
    response = api_client.post(
        "/api/v1/register", {"hostname": "gpu-01"}, format="json", HTTP_AUTHORIZATION=header
    )

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Node.objects.exists()


def _registered(response) -> Node:
    """The node a first registration made, whose key is the one the answer handed out."""
    assert response.status_code == 201, response.content
    node = Node.objects.get(hostname="gpu-01")
    assert response.json()["id"] == node.pk
    assert node_key_matches(node, response.json()["node_key"])
    return node


def test_valid_join_token_registers(register, join_token):
    _registered(register("gpu-01", token=join_token))


def test_join_token_not_needed_when_unset(register, settings):
    settings.JOIN_TOKEN = ""
    _registered(register("gpu-01"))


# --- Which address is stored -----------------------------------------------------------


def test_claimed_ip_ignored_without_token(register, settings):
    settings.JOIN_TOKEN = ""

    response = register("gpu-01", remote="10.0.0.5", ip="10.7.7.7")

    assert response.status_code == 201
    assert response.json()["ip"] == "10.0.0.5"


def test_claimed_ip_honoured_with_valid_token(register, join_token):
    response = register("gpu-01", remote="10.0.0.5", ip="10.7.7.7", token=join_token)

    assert response.status_code == 201
    assert response.json()["ip"] == "10.7.7.7"


def test_forwarded_for_ignored_from_untrusted_peer(register, settings):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.250.0.0/16")]

    response = register("gpu-01", remote="10.0.0.5", HTTP_X_FORWARDED_FOR="10.7.7.7")

    assert response.json()["ip"] == "10.0.0.5"


def test_forwarded_for_honoured_from_trusted_proxy(register, settings):
    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.250.0.0/16")]

    # The client can prepend anything; the proxy's own entry (rightmost untrusted) counts.
    response = register(
        "gpu-01", remote="10.250.0.1", HTTP_X_FORWARDED_FOR="10.6.6.6, 10.0.0.8, 10.250.0.2"
    )

    assert response.status_code == 201
    assert response.json()["ip"] == "10.0.0.8"


# --- Rate limit and CSRF ---------------------------------------------------------------


def test_registration_rate_limited_per_node_key(register, settings):
    # Per address it is the proxy's limit_req (tests/inventory/test_server_stack.py); the
    # API counts what only it knows, the node key.
    settings.REGISTER_RATE = "3/min"
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]

    codes = [register("gpu-01", remote="10.0.0.5", key=key).status_code for _ in range(4)]
    other_key = register("gpu-02", remote="10.0.0.6").json()["node_key"]

    assert codes == [200, 200, 200, 429]
    assert register("gpu-02", remote="10.0.0.6", key=other_key).status_code == 200
    limited = register("gpu-01", remote="10.0.0.5", key=key)
    assert 0 < int(limited["Retry-After"]) <= 60
    detail = limited.json()["detail"]
    assert "X-MAC-Node-Key" in detail and "3/min per node (MAC_REGISTER_RATE)" in detail
    assert key not in detail


def test_registration_needs_no_csrf_token():
    client = Client(enforce_csrf_checks=True)

    response = client.post(
        "/api/v1/register",
        json.dumps({"hostname": "gpu-01"}),
        content_type="application/json",
        REMOTE_ADDR="10.0.0.5",
    )

    assert response.status_code == 201


# --- Bad input: a 400 naming the field ------------------------------------------------

BAD_FIELDS = [
    ({}, "hostname"),
    ({"hostname": ""}, "hostname"),
    ({"hostname": None}, "hostname"),
    ({"hostname": 12}, "hostname"),
    ({"hostname": "gpu_01"}, "hostname"),
    ({"hostname": "-gpu"}, "hostname"),
    ({"hostname": "gpu-"}, "hostname"),
    ({"hostname": "gpu..01"}, "hostname"),
    ({"hostname": "gpu-01."}, "hostname"),
    ({"hostname": "a" * 64}, "hostname"),
    ({"hostname": ".".join(["a" * 63] * 4)}, "hostname"),  # 255 characters
    ({"hostname": "<script>alert(1)</script>"}, "hostname"),
    ({"hostname": "gpü-01"}, "hostname"),
    ({"hostname": "gpu-01", "gpu_count": "8"}, "gpu_count"),
    ({"hostname": "gpu-01", "gpu_count": True}, "gpu_count"),
    ({"hostname": "gpu-01", "gpu_count": 1.5}, "gpu_count"),
    ({"hostname": "gpu-01", "gpu_count": -1}, "gpu_count"),
    ({"hostname": "gpu-01", "gpu_vendor": "intel"}, "gpu_vendor"),
    ({"hostname": "gpu-01", "gpu_vendor": ["nvidia"]}, "gpu_vendor"),
    ({"hostname": "gpu-01", "nics": {"name": "mlx5_0"}}, "nics"),
    ({"hostname": "gpu-01", "nics": ["mlx5_0"]}, "nics"),
    ({"hostname": "gpu-01", "nics": [{"name": {"nested": 1}}]}, "nics"),
    ({"hostname": "gpu-01", "nics": [{"n": i} for i in range(65)]}, "nics"),
    ({"hostname": "gpu-01", "exporters": {"sys-exporter": "29101"}}, "exporters"),
    ({"hostname": "gpu-01", "exporters": {"sys-exporter": 70000}}, "exporters"),
    ({"hostname": "gpu-01", "exporters": {"Sys Exporter": 29101}}, "exporters"),
    ({"hostname": "gpu-01", "exporters": [29101]}, "exporters"),
    ({"hostname": "gpu-01", "labels": {"rack": 1}}, "labels"),
    ({"hostname": "gpu-01", "labels": {f"k{i}": "v" for i in range(33)}}, "labels"),
    ({"hostname": "gpu-01", "labels": {"bad key": "v"}}, "labels"),
    ({"hostname": "gpu-01", "labels": {"rack": "x" * 257}}, "labels"),
    ({"hostname": "gpu-01", "agent_version": 1}, "agent_version"),
    ({"hostname": "gpu-01", "agent_version": "v" * 65}, "agent_version"),
    ({"hostname": "gpu-01", "machine_id": ["x"]}, "machine_id"),
]


@pytest.mark.parametrize(("body", "field"), BAD_FIELDS)
def test_bad_input_answers_400_naming_the_field(api_client, body, field):
    response = api_client.post("/api/v1/register", body, format="json", REMOTE_ADDR="10.0.0.5")

    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field]
    assert all(isinstance(m, str) and m for m in _messages(errors[field]))
    assert not Node.objects.exists()


def _messages(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [m for item in value for m in _messages(item)]
    if isinstance(value, dict):
        return [m for item in value.values() for m in _messages(item)]
    return []


def test_claimed_ip_of_wrong_type_names_ip(register, join_token):
    response = register("gpu-01", ip=167772165, token=join_token)

    assert response.status_code == 400
    assert list(response.json()) == ["ip"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'{"hostname": "gpu-01"', "not valid JSON"),
        (b"", "required"),
        (b'{"hostname": NaN}', "not valid JSON"),
        (b'\xff\xfe{"hostname": 1}', "not UTF-8"),
    ],
    ids=["truncated", "empty", "nan", "not-utf8"],
)
def test_malformed_body_answers_400(raw, needle):
    response = Client().post(
        "/api/v1/register", raw, content_type="application/json", REMOTE_ADDR="10.0.0.5"
    )

    assert response.status_code == 400
    assert needle in json.dumps(response.json())


def test_body_that_is_not_an_object_answers_400():
    response = Client().post(
        "/api/v1/register", "[1, 2]", content_type="application/json", REMOTE_ADDR="10.0.0.5"
    )

    assert response.status_code == 400
    assert "non_field_errors" in response.json()


def test_huge_body_answers_400_naming_the_body(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    body = json.dumps({"hostname": "gpu-01", "labels": {"pad": "x" * 200}, "junk": "y" * 10_000})

    response = Client().post(
        "/api/v1/register", body, content_type="application/json", REMOTE_ADDR="10.0.0.5"
    )

    assert response.status_code == 400
    assert response.json() == {
        "body": ["request body larger than 4096 bytes (MAC_MAX_BODY_BYTES); send less."]
    }


def test_parser_stops_reading_at_the_limit_when_length_is_not_declared(settings, rf):
    import io

    from rest_framework.exceptions import ValidationError

    from inventory.api.parsers import LimitedJSONParser

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    request = rf.post("/api/v1/register", b"", content_type="application/json")
    request.META.pop("CONTENT_LENGTH", None)
    stream = io.BytesIO(json.dumps({"junk": "y" * 10_000}).encode())

    with pytest.raises(ValidationError) as caught:
        LimitedJSONParser().parse(stream, parser_context={"request": request})

    assert "larger than 4096 bytes" in str(caught.value.detail["body"][0])
    assert stream.tell() == 4097  # never read more than the limit and one byte


@pytest.mark.parametrize("declared", ["9" * 5000, "\u00b2"])
def test_a_declared_length_past_what_int_reads_is_the_body_s_400(settings, rf, declared):
    import io

    from rest_framework.exceptions import ValidationError

    from inventory.api.parsers import LimitedJSONParser

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    request = rf.post("/api/v1/register", b"", content_type="application/json")
    request.META["CONTENT_LENGTH"] = declared  # a digit int() refuses, or 5,000 of them
    stream = io.BytesIO(json.dumps({"hostname": "gpu-01"}).encode())
    if declared.isascii():
        with pytest.raises(ValidationError) as caught:
            LimitedJSONParser().parse(stream, parser_context={"request": request})
        assert "larger than 4096 bytes" in str(caught.value.detail["body"][0])
    else:  # not a number at all: the body is read, within the limit, as if undeclared
        assert LimitedJSONParser().parse(stream, parser_context={"request": request}) == {
            "hostname": "gpu-01"
        }


def test_form_encoded_body_is_unsupported_media_type():
    response = Client().post("/api/v1/register", {"hostname": "gpu-01"}, REMOTE_ADDR="10.0.0.5")

    assert response.status_code == 415
    assert "multipart/form-data" in response.json()["detail"]


# --- A claimed address says where to probe; it does not prove who is asking -----------


def test_claiming_a_known_nodes_address_needs_its_key(register, join_token):
    key = register("gpu-01", remote="10.0.0.5", token=join_token).json()["node_key"]

    # Another token holder, at 10.0.0.66, pretends to be gpu-01 at its own address.
    stolen = register("gpu-01", remote="10.0.0.66", ip="10.0.0.5", token=join_token)
    owner = register("gpu-01", remote="10.0.0.66", ip="10.0.0.5", token=join_token, key=key)

    assert stolen.status_code == 403
    assert "on behalf of 10.0.0.5" in stolen.json()["detail"]
    assert owner.status_code == 200  # the node itself, behind NAT, with its key


def test_claimed_address_equal_to_the_source_counts_as_the_nodes_own(register, join_token):
    first = register("gpu-01", remote="10.0.0.5", ip="10.0.0.5", token=join_token).json()

    again = register("gpu-01", remote="10.0.0.5", ip="10.0.0.5", token=join_token)

    assert again.status_code == 200
    # The same node: one row, its id and address unchanged.
    assert list(Node.objects.values_list("pk", "hostname", "ip")) == [
        (first["id"], "gpu-01", "10.0.0.5")
    ]
    assert again.json()["id"] == first["id"]


def test_claiming_a_known_address_under_a_new_name_does_not_rename(register, join_token):
    register("gpu-01", remote="10.0.0.5", token=join_token)

    response = register("evil-01", remote="10.0.0.66", ip="10.0.0.5", token=join_token)

    assert response.status_code == 409
    assert "gpu-01" in response.json()["detail"]
    assert list(Node.objects.values_list("hostname", flat=True)) == ["gpu-01"]


def test_a_reset_key_cannot_be_collected_through_a_claimed_address(register, join_token):
    from inventory.services import reset_node_key

    register("gpu-01", remote="10.0.0.5", token=join_token)
    reset_node_key(Node.objects.get(), actor="admin:root")

    grab = register("gpu-01", remote="10.0.0.66", ip="10.0.0.5", token=join_token)
    home = register("gpu-01", remote="10.0.0.5", token=join_token)

    assert grab.status_code == 403
    assert "node_key" in home.json()


def test_chunked_body_without_length_answers_400_naming_the_body():
    response = Client().post(
        "/api/v1/register",
        json.dumps({"hostname": "gpu-01"}),
        content_type="application/json",
        REMOTE_ADDR="10.0.0.5",
        HTTP_TRANSFER_ENCODING="chunked",
        CONTENT_LENGTH="",
    )

    assert response.status_code == 400
    assert "Content-Length" in response.json()["body"][0]


def test_registration_keeps_working_when_the_rate_limit_cache_is_down(register, settings, caplog):
    key = register("gpu-01", remote="10.0.0.5").json()["node_key"]
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        }
    }

    response = register("gpu-01", remote="10.0.0.5", key=key)

    assert response.status_code == 200
    assert "rate limit of register not applied" in caplog.text
