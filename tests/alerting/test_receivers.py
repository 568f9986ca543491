"""A maintenance change whose silence update cannot be queued: saved, and the answer says so."""

from __future__ import annotations

import pytest

from alerting import bulkheads

# Each change commits for real, as in production: its on-commit announcement then runs
# before the view answers.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_bulkhead_full(settings):
    """Every slot of this worker's broker bulkhead taken, as by publishes to a hung Redis."""
    settings.BULKHEAD_BROKER = 1
    bulkheads.BROKER.reset()
    try:
        with bulkheads.BROKER.slot():
            yield
    finally:
        bulkheads.BROKER.reset()


def test_a_publish_past_the_broker_bulkhead_is_deferred_and_the_api_says_so(
    api_client, staff, make_node, broker_bulkhead_full
):
    node = make_node("gpu-41", "10.1.0.41")
    api_client.force_authenticate(staff)

    done = api_client.put(
        f"/api/v1/nodes/{node.pk}/maintenance", {"maintenance": True}, format="json"
    )

    assert done.status_code == 200
    body = done.json()
    assert body["changed"] is True
    assert "the silence update was not queued" in body["deferred"]
    assert "MAC_BULKHEAD_BROKER=1" in body["deferred"]
    assert "next poll of Alertmanager" in body["deferred"]
    node.refresh_from_db()
    assert node.maintenance is True


def test_a_queued_silence_update_defers_nothing(api_client, staff, make_node):
    node = make_node("gpu-42", "10.1.0.42")
    api_client.force_authenticate(staff)

    done = api_client.put(
        f"/api/v1/nodes/{node.pk}/maintenance", {"maintenance": True}, format="json"
    )

    assert done.status_code == 200 and done.json()["deferred"] == ""


def test_the_dashboard_switch_shows_the_deferred_silence_as_a_warning(
    client, staff, make_node, broker_bulkhead_full
):
    node = make_node("gpu-43", "10.1.0.43")
    client.force_login(staff)

    response = client.post(f"/nodes/{node.pk}/maintenance", {"maintenance": "on"}, follow=True)

    page = response.content.decode()
    assert 'class="notice notice-warning"' in page
    assert "The silence update was not queued" in page
