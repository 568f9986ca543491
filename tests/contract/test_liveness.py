"""contract.liveness against real HTTP servers on loopback: every outcome, deadlines, caps."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from contract.httpwire import READ_CAP, looks_like_exposition
from contract.liveness import (
    SECOND_CHANCE_AT,
    ProbeResult,
    ProbeStats,
    Target,
    loop_factory,
    probe_targets,
    probe_url,
    run_probe,
    services_to_probe,
)
from contract.outcomes import Outcome
from contract.services import Service
from testkit.ports import check_contract_ports
from testkit.simfleet import Mode, render_exposition

BOTH = ("sys-exporter", "nic-exporter")


def test_it_classifies_each_failure_mode(fleet):
    modes = [Mode.ANSWER, Mode.REFUSE, Mode.HANG, Mode.BLACKHOLE, Mode.BAD_BODY, Mode.HTTP_500]
    runner = fleet(len(modes))
    for index, mode in enumerate(modes):
        runner.set_mode(index, "sys-exporter", mode)
    targets = [Target(i, node.ip, BOTH) for i, node in enumerate(runner.nodes)]

    results = run_probe(targets, timeout=0.5, concurrency=50)

    outcomes = [result.sys.outcome for result in results]
    assert outcomes == [
        Outcome.OK,
        Outcome.REFUSED,
        Outcome.TIMEOUT,
        Outcome.TIMEOUT,
        Outcome.BAD_BODY,
        Outcome.HTTP_STATUS,
    ]
    assert results[5].sys.http_status == 500
    assert "within 0.5 s" in results[2].sys.detail
    assert all(result.nic.outcome is Outcome.OK for result in results)


def test_black_holed_port_drops_syns_instead_of_refusing(fleet):
    runner = fleet(1)
    runner.set_mode(0, "sys-exporter", Mode.BLACKHOLE)
    ip = runner.nodes[0].ip
    with socket.socket() as client:
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.connect((ip, 29101))  # no RST comes back: the SYN was dropped


def test_deadline_starts_when_the_probe_gets_its_slot(fleet):
    # One slot, the first target hangs for the whole deadline: the live ones
    # behind it waited, but that wait does not count against their deadline.
    runner = fleet(4)
    runner.set_mode(0, "sys-exporter", Mode.HANG)
    targets = [Target(i, node.ip, ()) for i, node in enumerate(runner.nodes)]

    results = asyncio.run(probe_targets(targets, timeout=0.4, concurrency=1))

    assert results[0].sys.outcome is Outcome.TIMEOUT
    assert [r.sys.outcome for r in results[1:]] == [Outcome.OK] * 3


async def _serve_raw(answer: bytes) -> tuple[asyncio.base_events.Server, int]:
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _probe_raw(answer: bytes) -> ProbeResult:
    """Probe a one-off server that sends `answer` (on a free port, sys-exporter's path)."""
    server, port = await _serve_raw(answer)
    service = Service("sys-exporter", port, "bridge", "/metrics", "test")
    async with server:
        return await probe_url(service, "127.0.0.1", 1.0)


async def test_redirects_are_not_followed():
    answer = b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\nContent-Length: 0\r\n\r\n"
    result = await _probe_raw(answer)
    assert result.outcome is Outcome.HTTP_STATUS
    assert result.http_status == 302


async def test_a_huge_body_is_read_only_up_to_the_cap():
    # The server offers 200 MB; the probe judges the first lines and hangs up,
    # so the server cannot push more than what fits in the socket buffers.
    total = 200 * 1024 * 1024
    sent = 0

    async def handle(reader, writer):
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n".encode())
        chunk = render_exposition("big") + b"node_filler_bytes 1\n" * 3000
        try:
            while sent < total:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except (ConnectionError, OSError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    service = Service("sys-exporter", server.sockets[0].getsockname()[1], "bridge", "/metrics", "")
    async with server:
        result = await probe_url(service, "127.0.0.1", 2.0)
        await asyncio.sleep(0.2)
    assert result.outcome is Outcome.OK
    assert READ_CAP <= 16 * 1024
    assert sent < total / 4


async def test_a_chunked_exposition_is_understood():
    body = render_exposition("chunky")
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    result = await _probe_raw(head + chunked)
    assert result.outcome is Outcome.OK


async def test_garbage_instead_of_http_is_an_error():
    result = await _probe_raw(b"SSH-2.0-OpenSSH_9.2\r\n")
    assert result.outcome is Outcome.ERROR
    assert "not an HTTP response" in result.detail


def test_the_exposition_check_accepts_real_pages_and_rejects_others():
    assert looks_like_exposition(render_exposition("n1"), truncated=False)
    assert looks_like_exposition(b'up{job="x"} 1\nnode_load1 0.5 1700000000000\n', False)
    assert not looks_like_exposition(b"<html><body>login</body></html>\n", False)
    assert not looks_like_exposition(b"", False)
    assert not looks_like_exposition(b'{"status": "ok"}', False)
    # A cut line at the end of a capped read is ignored, not held against the page.
    assert looks_like_exposition(b'# TYPE a gauge\na 1\nb{x="tru', truncated=True)


def test_reported_services_add_probes_but_ports_come_from_the_table():
    names = [service.name for service in services_to_probe(["dcgm-exporter", "evil-service"])]
    assert names == ["dcgm-exporter", "nic-exporter", "sys-exporter"]
    assert {service.port for service in services_to_probe(["dcgm-exporter"])} == {
        29150,
        29500,
        29101,
    }


async def test_an_online_node_that_hangs_once_gets_a_second_connection_inside_the_deadline():
    from testkit.simfleet import loopback_base

    ip = loopback_base().rsplit(".", 1)[0] + ".1"
    page = render_exposition("flaky")
    connections = {29101: 0, 29500: 0}

    def first_hangs_then_answers(port: int):
        async def handle(reader, writer):
            connections[port] += 1
            await reader.readuntil(b"\r\n\r\n")
            if connections[port] == 1:
                await asyncio.sleep(5)  # past the deadline: the first connection times out
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page))
            await writer.drain()
            writer.close()

        return handle

    check_contract_ports([ip], connections)  # not beside a MAC agent's (a skip)
    servers = [await asyncio.start_server(first_hangs_then_answers(p), ip, p) for p in connections]
    try:
        stats = ProbeStats()
        was_online = Target(1, ip, (), confirm=True)
        loop = asyncio.get_running_loop()
        started = loop.time()
        timeout = 1.0
        [result] = await probe_targets([was_online], timeout=timeout, stats=stats)
        took = loop.time() - started
        assert result.sys.outcome is Outcome.OK
        assert result.sys.attempts == 2
        assert stats.confirmed == 1
        # The second connection opened at half the timeout and answered at once: the
        # whole probe stayed inside its one deadline. A second round would start at the
        # deadline, and waiting out the first connection's grace would take two.
        assert SECOND_CHANCE_AT * timeout <= took < timeout
        connections.update({29101: 0, 29500: 0})
        [result] = await probe_targets([Target(1, ip, ())], timeout=0.3)
        assert result.sys.outcome is Outcome.TIMEOUT  # not Online before: no second chance
        assert result.sys.attempts == 1
    finally:
        for server in servers:
            server.close()


@pytest.mark.parametrize("mode", [Mode.BLACKHOLE, Mode.REFUSE])
def test_a_dead_online_node_fails_within_one_timeout(fleet, mode):
    runner = fleet(2)
    runner.set_node_mode(0, mode)
    targets = [Target(i, node.ip, BOTH, confirm=True) for i, node in enumerate(runner.nodes)]
    stats = ProbeStats()

    started = time.monotonic()
    dead, alive = run_probe(targets, timeout=0.8, concurrency=50, stats=stats)
    took = time.monotonic() - started

    assert took < 2 * 0.8  # one deadline, not two
    expected = Outcome.REFUSED if mode is Mode.REFUSE else Outcome.TIMEOUT
    assert {r.outcome for r in dead.results.values()} == {expected}
    assert all(r.attempts == 2 for r in dead.results.values())
    if mode is not Mode.REFUSE:
        assert "within 0.8 s" in dead.sys.detail  # the first connection had the whole timeout
    assert alive.sys.ok and alive.sys.attempts == 1  # a quick answer never opens a second
    assert stats.confirmed == 1


def test_an_online_node_that_accepts_but_never_answers_fails_after_two_timeouts(fleet):
    runner = fleet(1)
    runner.set_mode(0, "sys-exporter", Mode.HANG)
    target = Target(1, runner.nodes[0].ip, (), confirm=True)

    started = time.monotonic()
    [result] = run_probe([target], timeout=0.5, concurrency=10)

    # Two timeouts (the first connection's, plus its grace), not three (another attempt).
    assert 2 * 0.5 <= time.monotonic() - started < 3 * 0.5
    assert (result.sys.outcome, result.sys.attempts) == (Outcome.TIMEOUT, 2)
    assert "within 1 s" in result.sys.detail  # the first connection's timeout plus its grace


async def test_an_online_node_too_busy_to_answer_in_time_is_forgiven_once():
    # A busy agent: its kernel accepts at once, its answers take 4/3 timeouts, for
    # every connection. The second connection cannot help; the first one's grace does.
    page = render_exposition("busy")
    timeout, late = 0.6, 0.8

    async def answer_late(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(late)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_late, "127.0.0.1", 0)
    service = Service("sys-exporter", server.sockets[0].getsockname()[1], "bridge", "/metrics", "")
    try:
        from contract.liveness import probe_confirmed

        assert (await probe_url(service, "127.0.0.1", timeout)).outcome is Outcome.TIMEOUT
        result = await probe_confirmed(service, "127.0.0.1", timeout)
    finally:
        server.close()
    assert (result.outcome, result.attempts) == (Outcome.OK, 2)
    # When the answer came, not the whole wait (the grace ends at two timeouts).
    assert late <= result.elapsed < 2 * timeout


@pytest.mark.parametrize("uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_an_answer_that_arrived_before_the_deadline_counts_though_the_loop_was_starved(uvloop):
    page = render_exposition("starved")
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once() -> None:  # in a thread: it answers while our event loop is stuck
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            time.sleep(0.05)
            conn.sendall(answer)

    server = threading.Thread(target=serve_once)
    server.start()
    service = Service("sys-exporter", port, "bridge", "/metrics", "test")

    async def probe_while_starved() -> ProbeResult:
        # The loop is busy (thousands of probes' callbacks) from 20 ms to 320 ms: the
        # answer lands in the socket at 50 ms, and at 320 ms the 100 ms deadline is overdue.
        asyncio.get_running_loop().call_later(0.02, time.sleep, 0.3)
        return await probe_url(service, "127.0.0.1", 0.1)

    factory = loop_factory() if uvloop else asyncio.new_event_loop
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(probe_while_starved())
    finally:
        server.join(5)
        listener.close()
    assert result.outcome is Outcome.OK


async def test_a_server_that_keeps_the_connection_open_still_gets_judged():
    page = render_exposition("keepalive")
    release = asyncio.Event()

    async def answer_and_linger(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page))
        await writer.drain()
        await release.wait()  # ignores `Connection: close`
        writer.close()

    server = await asyncio.start_server(answer_and_linger, "127.0.0.1", 0)
    service = Service("sys-exporter", server.sockets[0].getsockname()[1], "bridge", "/metrics", "")
    try:
        result = await probe_url(service, "127.0.0.1", 1.0)
    finally:
        release.set()
        server.close()
    assert result.outcome is Outcome.OK
    assert result.elapsed < 0.5


async def test_no_more_probes_than_the_concurrency_are_in_flight():
    from testkit.simfleet import loopback_base

    prefix = loopback_base().rsplit(".", 1)[0]
    page = render_exposition("slow")
    in_flight = peak = 0

    async def slow_answer(reader, writer):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page))
        await writer.drain()
        writer.close()
        in_flight -= 1

    ips = [f"{prefix}.{i}" for i in range(1, 9)]
    check_contract_ports(ips, (29101, 29500))
    servers = [
        await asyncio.start_server(slow_answer, ip, port) for ip in ips for port in (29101, 29500)
    ]
    try:
        results = await probe_targets([Target(i, ip) for i, ip in enumerate(ips)], concurrency=3)
    finally:
        for server in servers:
            server.close()
    assert all(result.sys.ok and result.nic.ok for result in results)
    assert peak == 3


async def test_cancelling_a_probe_with_a_second_connection_in_flight_leaves_no_task(fleet):
    from contract.liveness import probe_confirmed
    from contract.services import SYS_EXPORTER

    runner = fleet(1)
    runner.set_mode(0, "sys-exporter", Mode.HANG)
    before = asyncio.all_tasks()
    probe = asyncio.ensure_future(probe_confirmed(SYS_EXPORTER, runner.nodes[0].ip, 2.0))
    await asyncio.sleep(1.2)  # past half the timeout: both connections are waiting
    assert len(asyncio.all_tasks() - before) == 2
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before == set()


async def test_a_gpu_exporters_probe_asks_for_the_verdicts_and_keeps_the_answer():
    from contract.verdicts import VERDICT_QUERY, VERDICT_READ_CAP

    asked: list[bytes] = []
    body = b'mac_gpu_health{gpu="0",state="healthy",action="none"} 0\n' * 300  # ~17 KiB

    async def handle(reader, writer):
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    gpu = Service("dcgm-exporter", port, "bridge", "/metrics", "", VERDICT_QUERY, "nvidia")
    plain = Service("sys-exporter", port, "bridge", "/metrics", "")
    async with server:
        verdicts = await probe_url(gpu, "127.0.0.1", 1.0)
        liveness = await probe_url(plain, "127.0.0.1", 1.0)
    assert asked[0].startswith(b"GET /metrics?name%5B%5D=mac_gpu_health&name%5B%5D=")
    assert verdicts.ok and verdicts.answer == body and not verdicts.cut
    assert READ_CAP < len(body) < VERDICT_READ_CAP  # more than a liveness probe reads
    assert asked[1].startswith(b"GET /metrics HTTP/1.1") and liveness.answer is None


def test_an_empty_answer_to_the_verdict_query_is_an_exporter_with_nothing_to_judge():
    """A GPU exporter without GPUs (or without its library) has no verdict lines: the
    filtered page is empty, and the exporter is still up. A plain /metrics must not be."""
    from contract.httpwire import judge_answer
    from contract.services import BY_NAME

    empty = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n"
    assert judge_answer(BY_NAME["dcgm-exporter"], empty, False)[0] is Outcome.OK
    assert judge_answer(BY_NAME["rocm-exporter"], empty, False)[0] is Outcome.OK
    assert judge_answer(BY_NAME["sys-exporter"], empty, False)[0] is Outcome.BAD_BODY
