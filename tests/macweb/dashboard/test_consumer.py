"""The live feed's consumer on a real Redis channel layer, through the real ASGI stack."""

from __future__ import annotations

import asyncio
import logging

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from inventory.live import broadcast_node_changes
from macweb.asgi import application
from macweb.dashboard.consumers import UNAUTHORISED
from testkit.factories import offline_node, online_gpu_node

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture(autouse=True)
async def close_thread_connections():
    """Consumers reach the database from asgiref's worker thread; close its connection so
    the test database can be dropped at the end of the run."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def communicator(cookie: str | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, "/ws/fleet/", headers=headers)


async def open_socket(cookie: str) -> WebsocketCommunicator:
    comm = communicator(cookie)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    hello = await comm.receive_json_from(timeout=5)
    assert hello["type"] == "hello"
    return comm


async def test_it_refuses_anonymous_users_before_the_handshake():
    comm = communicator(None)
    connected, code = await comm.connect(timeout=10)
    await comm.disconnect()  # what a server does after the refusal; lets the consumer end
    assert not connected
    assert code == UNAUTHORISED


async def test_it_refuses_a_forged_session_cookie():
    comm = communicator("not-a-session")
    connected, code = await comm.connect(timeout=10)
    await comm.disconnect()
    assert (connected, code) == (False, UNAUTHORISED)


async def test_a_broadcast_batch_arrives_as_one_message(session_cookie):
    nodes = [await sync_to_async(offline_node)(), await sync_to_async(online_gpu_node)()]
    comm = await open_socket(session_cookie)
    try:
        await sync_to_async(broadcast_node_changes)([n.summary() for n in nodes])
        message = await comm.receive_json_from(timeout=5)
        assert message["type"] == "nodes.changed"
        assert [c["hostname"] for c in message["changes"]] == [n.hostname for n in nodes]
        assert message["changes"][0]["status"] == "offline"
        assert await comm.receive_nothing(timeout=0.3)
    finally:
        await comm.disconnect()


async def test_removed_nodes_reach_the_page_by_id(session_cookie):
    comm = await open_socket(session_cookie)
    try:
        await sync_to_async(broadcast_node_changes)([], removed=[42, 7])
        message = await comm.receive_json_from(timeout=5)
        assert message == {"type": "nodes.changed", "changes": [], "removed": [7, 42]}
    finally:
        await comm.disconnect()


async def test_a_closed_page_leaves_the_group(session_cookie):
    layer = get_channel_layer()
    comm = await open_socket(session_cookie)
    from inventory.live import DASHBOARD_GROUP  # only to look at the layer's own record

    key = layer._group_key(DASHBOARD_GROUP)
    async with layer.connection(layer.consistent_hash(DASHBOARD_GROUP)) as redis:
        members_open = await redis.zcard(key)
    await comm.disconnect()
    async with layer.connection(layer.consistent_hash(DASHBOARD_GROUP)) as redis:
        members_closed = await redis.zcard(key)
    assert members_open >= 1
    assert members_closed == members_open - 1


async def test_it_answers_pings(session_cookie):
    comm = await open_socket(session_cookie)
    try:
        await comm.send_json_to({"type": "ping"})
        assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}
    finally:
        await comm.disconnect()


async def test_200_clients_get_every_batch_with_no_over_capacity_drops(session_cookie, caplog):
    caplog.set_level(logging.INFO, logger="channels_redis")
    node = await sync_to_async(online_gpu_node)()
    sockets = await asyncio.gather(*(open_socket(session_cookie) for _ in range(200)))
    try:
        for sweep in range(5):
            summary = node.summary() | {"status_detail": f"sweep {sweep}"}
            await sync_to_async(broadcast_node_changes)([summary])
        for comm in sockets:
            details = [
                (await comm.receive_json_from(timeout=10))["changes"][0]["status_detail"]
                for _ in range(5)
            ]
            assert details == [f"sweep {n}" for n in range(5)]
            assert await comm.receive_nothing(timeout=0.01)
    finally:
        await asyncio.gather(*(comm.disconnect() for comm in sockets))
    assert not [r for r in caplog.records if "over capacity" in r.getMessage()]


async def test_a_quiet_page_stays_connected_past_the_layers_blocking_read(session_cookie):
    """channels_redis waits 5 s per BZPOPMIN; a read timeout of 5 s (redis-py 8's default)
    used to end every consumer that had nothing to receive for that long."""
    node = await sync_to_async(online_gpu_node)()
    comm = await open_socket(session_cookie)
    try:
        assert await comm.receive_nothing(timeout=6.5)  # no close frame either
        await sync_to_async(broadcast_node_changes)([node.summary()])
        message = await comm.receive_json_from(timeout=5)
        assert message["changes"][0]["id"] == node.pk
    finally:
        await comm.disconnect()


async def test_pings_renew_the_group_membership(session_cookie, monkeypatch):
    from inventory.live import DASHBOARD_GROUP  # only to look at the layer's own record
    from macweb.dashboard import consumers

    layer = get_channel_layer()
    comm = await open_socket(session_cookie)
    try:
        key = layer._group_key(DASHBOARD_GROUP)
        async with layer.connection(layer.consistent_hash(DASHBOARD_GROUP)) as redis:
            before = {m: s for m, s in await redis.zrange(key, 0, -1, withscores=True)}
        await asyncio.sleep(1.1)  # the layer stamps members in whole seconds
        monkeypatch.setattr(consumers, "REJOIN_SECONDS", 0)
        await comm.send_json_to({"type": "ping"})
        assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}
        async with layer.connection(layer.consistent_hash(DASHBOARD_GROUP)) as redis:
            after = {m: s for m, s in await redis.zrange(key, 0, -1, withscores=True)}
        renewed = [m for m in after if m in before and after[m] > before[m]]
        assert len(renewed) == 1
    finally:
        await comm.disconnect()


@pytest.mark.parametrize("ending", ["logout", "deactivated", "password changed"])
async def test_a_page_whose_session_ended_is_closed_at_its_next_ping(
    session_cookie, user, monkeypatch, ending
):
    """The session is checked at the handshake and again while the page is open: a page
    left open after a logout elsewhere, or an account switched off, stops receiving."""
    from django.contrib.sessions.models import Session

    from macweb.dashboard import consumers

    comm = await open_socket(session_cookie)
    try:
        await comm.send_json_to({"type": "ping"})
        assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}  # still in
        monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0)
        await comm.send_json_to({"type": "ping"})
        assert (await comm.receive_json_from(timeout=5)) == {"type": "pong"}  # checked, in

        if ending == "logout":
            await sync_to_async(Session.objects.filter(session_key=session_cookie).delete)()
        elif ending == "deactivated":
            user.is_active = False
            await sync_to_async(user.save)()
        else:
            user.set_password("a-new-operator-pass")
            await sync_to_async(user.save)()
        await comm.send_json_to({"type": "ping"})

        closed = await comm.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": UNAUTHORISED}
    finally:
        await comm.disconnect()


async def test_a_push_carries_the_fix_that_names_the_gpus_to_reset(session_cookie):
    """The node page's Fix box follows the push with the same words as the page renders:
    the summary has only the action, so the push adds the fix that names the GPUs."""
    from inventory.models import GpuHealth
    from macweb.dashboard.queries import health_fix

    uuid = "GPU-5d2f7b1e-8c3a-4f6e-9b0d-2a7c1e4f8b93"

    def prepare():
        node = online_gpu_node(health_state="unhealthy", health_action="reset_gpu")
        GpuHealth.objects.create(node=node, index=2, uuid=uuid, action="reset_gpu")
        GpuHealth.objects.create(node=node, index=5, uuid="GPU-1;curl x|sh", action="reset_gpu")
        return node, offline_node(), health_fix(node)

    node, plain, fix = await sync_to_async(prepare)()
    comm = await open_socket(session_cookie)
    try:
        await sync_to_async(broadcast_node_changes)([node.summary(), plain.summary()])
        message = await comm.receive_json_from(timeout=5)
    finally:
        await comm.disconnect()
    reset, other = message["changes"]
    assert reset["health_fix"] == fix
    assert f"  sudo mac gpu reset {uuid}\n  sudo mac gpu reset 5\n" in fix and "curl" not in fix
    assert "health_fix" not in other  # its fix is the vocabulary's


async def test_a_failing_fix_lookup_still_delivers_the_batch_to_every_page(
    session_cookie, monkeypatch, caplog
):
    """The frame is built once for every page of the process: an error adding the fixes
    (not only the database's) must not fail them all. The pages get the summaries as they
    are, the vocabulary's fix standing in."""
    from macweb.dashboard import queries

    def broken(_rows):
        raise RuntimeError("a bug in with_health_fixes")

    monkeypatch.setattr(queries, "with_health_fixes", broken)
    node = await sync_to_async(online_gpu_node)(health_state="unhealthy", health_action="reset_gpu")
    sockets = [await open_socket(session_cookie) for _ in range(2)]
    try:
        await sync_to_async(broadcast_node_changes)([node.summary()])
        for comm in sockets:
            message = await comm.receive_json_from(timeout=5)
            assert message["type"] == "nodes.changed"
            (change,) = message["changes"]
            assert change["id"] == node.pk and "health_fix" not in change
    finally:
        await asyncio.gather(*(comm.disconnect() for comm in sockets))
    (logged,) = [r for r in caplog.records if "could not read the GPUs" in r.getMessage()]
    assert logged.exc_info and logged.exc_info[0] is RuntimeError
