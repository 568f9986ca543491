"""node_exporter-sized host pages for bench.scale_metrics, from node_exporter's own output.

A real GPU node's host metrics are about 1,500 series (node_exporter: CPUs, disks,
filesystems, interfaces...); the simulated fleet's sys-exporter page is a few dozen.
This server adds the difference: on port HOST_PORT of every node address it serves
the first HOST_SERIES samples of node_exporter's golden end-to-end output
(`prometheus/node_exporter/collector/fixtures/e2e-output.txt`, a capture listed in
tests/fixtures/captured/MANIFEST.md), with the comment lines of the kept families.

Values move from one scrape interval to the next (VARIANTS pre-rendered pages, the
counters growing), so the stores compress what a live node gives them, not a
constant. The node is a healthy one: its error and drop counters stand still and its
state codes (an RDMA port's ACTIVE, a read-only flag) keep the captured value, so MAC's
rules fire for none of the fleet, as for a real healthy cluster. (Moving them made every
node fire RdmaLinkDown and RdmaPortErrorsRising: 50 alerts per node, 50,000 at 1,000
nodes, which both engines' rule evaluation then paid for.) A scraper that accepts
gzip gets the page gzipped (made once at start, as the pages are). Run by the
benchmark as `python -m bench.hostpages --nodes N --base IP`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import re
import resource
import sys
import time
from pathlib import Path

from testkit.simfleet.fleet import node_addresses

HOST_PORT = 29199
HOST_SERIES = 1450
VARIANTS = 8
CAPTURE = "prometheus/node_exporter/collector/fixtures/e2e-output.txt"
INTERVAL = 15.0
# What stands still on a healthy node: counters of errors, drops and link losses, and
# gauges that are codes or flags rather than quantities.
STILL_COUNTER = re.compile(
    r"err|drop|discard|downed|overrun|collision|fail|integrity|recovery|timeout|sequence"
)
STILL_GAUGE = re.compile(r"(_id|_info|_state|_up|_readonly)$")
GROWS, WOBBLES, STILL = "grows", "wobbles", "still"


def captures_dir() -> Path:
    """The captures folder, as tests/exporters/captures.py finds it."""
    configured = os.environ.get("MAC_CAPTURES_DIR", "").strip()
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[1].parent / "shared" / "captures"


def motion(name: str, kind: str) -> str:
    """How a sample of family `name` (of TYPE `kind`) moves between intervals."""
    if kind == "counter":
        return STILL if STILL_COUNTER.search(name) else GROWS
    return STILL if STILL_GAUGE.search(name) else WOBBLES


def page_lines(text: str, series: int = HOST_SERIES) -> tuple[list[str], list[str]]:
    """(lines to serve, how each moves) for the first `series` samples."""
    kept: list[str] = []
    moves: list[str] = []
    kinds: dict[str, str] = {}
    samples = 0
    # Lines end at "\n" only: the DMI line's product_version holds a \x1c, which
    # str.splitlines() would break the line at (a page no scraper could parse).
    for line in text.split("\n"):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            kinds[name] = kind
        if line.startswith("#"):
            if samples < series:
                kept.append(line)
                moves.append(STILL)
            continue
        if samples >= series or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        kept.append(line)
        moves.append(motion(name, kinds.get(name, "untyped")))
        samples += 1
    return kept, moves


def render_variant(lines: list[str], moves: list[str], variant: int) -> bytes:
    """The page of interval `variant`: counters grown by a per-series step, gauges
    wobbling, what stands still on a healthy node as captured."""
    out = []
    for index, (line, move) in enumerate(zip(lines, moves, strict=True)):
        if line.startswith("#") or move == STILL:
            out.append(line)
            continue
        head, _, value = line.rpartition(" ")
        try:
            number = float(value)
        except ValueError:
            out.append(line)
            continue
        step = (index % 13 + 1) * variant
        number = number + 1000 * step if move == GROWS else number * (1 + 0.01 * (step % 7))
        # 15 digits: a byte counter's steps show (":g" kept 6, and 5.13709e+11 stood still).
        out.append(f"{head} {number:.15g}")
    return ("\n".join(out) + "\n").encode()


def response(body: bytes, packed: bool = False) -> bytes:
    """The HTTP answer carrying `body`; `packed`: gzipped, as node_exporter serves a
    scraper that accepts it."""
    if packed:
        body = gzip.compress(body, compresslevel=1)
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
        + ("Content-Encoding: gzip\r\n" if packed else "")
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


class _Page(asyncio.Protocol):
    pages: list[bytes] = []
    packed: list[bytes] = []  # the same pages gzipped, made once at start

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if b"\r\n\r\n" not in self.buffer:
            return
        # Every scraper of one interval gets the same page; the next interval the next one.
        head = self.buffer.split(b"\r\n\r\n", 1)[0].lower()
        pages = self.packed if b"accept-encoding:" in head and b"gzip" in head else self.pages
        page = pages[int(time.time() // INTERVAL) % len(pages)]
        self.transport.write(page)  # type: ignore[attr-defined]
        self.transport.close()


async def serve(addresses: list[str]) -> None:
    text = (captures_dir() / CAPTURE).read_text()
    lines, moves = page_lines(text)
    bodies = [render_variant(lines, moves, v) for v in range(VARIANTS)]
    _Page.pages = [response(body) for body in bodies]
    _Page.packed = [response(body, packed=True) for body in bodies]
    loop = asyncio.get_running_loop()
    servers = [await loop.create_server(_Page, ip, HOST_PORT, backlog=256) for ip in addresses]
    print("READY", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for server in servers:
            server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hostpages")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--base", required=True)
    args = parser.parse_args(argv)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(serve(node_addresses(args.nodes, args.base)))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
