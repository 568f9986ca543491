"""The simulated exporters' collection (testkit.simfleet.fleet.CollectedPage): a page is
rendered at most once per collection interval and gzipped at most once, as a real
exporter's collector and promhttp do, and a fault injected now shows at once."""

from __future__ import annotations

import gzip

from testkit.simfleet.fleet import CollectedPage, SimFleet, loopback_base


def _body(answer: bytes) -> tuple[bytes, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


def test_a_page_is_collected_once_per_interval_and_gzipped_once():
    now = [0.0]
    renders = []

    def render() -> bytes:
        renders.append(now[0])
        return f"gpu_temp {len(renders)}\n".encode()

    page = CollectedPage(render, lambda: now[0], interval=15)
    first = page()
    packed = page(gzipped=True)
    now[0] = 14.9
    assert page() == first and page(gzipped=True) == packed and len(renders) == 1
    head, body = _body(packed)
    assert b"Content-Encoding: gzip" in head and gzip.decompress(body) == b"gpu_temp 1\n"
    assert f"Content-Length: {len(body)}".encode() in head
    now[0] = 15.0
    assert _body(page())[1] == b"gpu_temp 2\n"
    page.forget()
    assert _body(page())[1] == b"gpu_temp 3\n" and len(renders) == 3


def test_interval_zero_renders_every_scrape_and_never_gzips():
    count = []
    page = CollectedPage(lambda: count.append(1) or b"x 1\n", lambda: 0.0, interval=0)
    answer = page(gzipped=True)
    page()
    assert len(count) == 2 and b"Content-Encoding" not in _body(answer)[0]


def test_an_injected_fault_shows_at_the_next_scrape_despite_the_collection():
    fleet = SimFleet(1, base=loopback_base(), profiles="nvidia=1", fault_rate=0,
                     collect_interval=3600)  # fmt: skip
    port = fleet.nodes[0].ports["dcgm-exporter"]
    before = _body(port.reply(b"/metrics"))[1]
    assert _body(port.reply(b"/metrics"))[1] == before  # the same collection
    fleet.inject(0, "xid", target=0, xid=79)
    assert _body(port.reply(b"/metrics"))[1] != before
