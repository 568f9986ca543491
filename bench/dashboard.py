"""Dashboard benchmark: `python -m bench.dashboard`.

Real servers and sockets: a throwaway PostgreSQL database (created and dropped
here), uvicorn serving macweb.asgi (one worker), the Redis channel layer, and
aiohttp clients logged in through the real login form.

1. Fleet page time-to-first-byte and payload with 1,000 and then 10,000 nodes
   (the page, its JSON twin, a filtered page), beside the login page as the
   baseline of a page that reads no nodes.
2. Live updates: N WebSocket clients on /ws/fleet/; a node's status is changed
   in the database and broadcast the way the sweep does it (one
   broadcast_node_changes call); we time from just before the UPDATE to the
   moment the last client has the message. Median and p99 over many rounds,
   with 200 clients beside 1 client as the baseline.
3. Open node pages: each reads its GPU rows (`/nodes/<id>/gpus.html`, 8 GPUs with
   their verdicts and the Slurm jobs holding them) every GPU_POLL seconds, as node.js
   does. N pages are N / GPU_POLL requests a second, spread evenly over the window; we
   time each and count the server's CPU seconds over the window (psutil), beside no
   open page as the baseline, so the cost of one more open page can be read.

Results go to docs/benchmarks.md (section "dashboard").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchdb import bench_database  # noqa: E402
from bench.report import median, percentile, update_section, verdict  # noqa: E402
from bench.webfleet import OPERATOR, make_operator, populate  # noqa: E402
from testkit import dashboard_servers as servers  # noqa: E402
from testkit.processes import stop_process  # noqa: E402

PAGE_RUNS = 15
# node.js reads the GPU rows every 30 s (and after a push); the sizes of open node pages.
GPU_POLL = 30.0
OPEN_PAGES = (0, 100, 300, 1000)
GPU_WINDOW = 30.0
GPU_NODES = 1000  # nodes given 8 GPUs' rows and jobs; each open page shows one of them
WS_ROUNDS = 40
BIG_BATCH = 500  # a sweep in which 5 % of 10,000 nodes changed
MARKER = re.compile(r'"status_detail": ?"(bench-[0-9]+-[0-9]+-[0-9]+)"')
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def log_in(session: aiohttp.ClientSession, base: str) -> None:
    """The real login form: GET for the CSRF token, POST the credentials."""
    async with session.get(f"{base}/accounts/login/") as resp:
        token = CSRF_INPUT.search(await resp.text()).group(1)
    form = {"username": OPERATOR[0], "password": OPERATOR[1], "csrfmiddlewaretoken": token}
    headers = {"Referer": f"{base}/accounts/login/"}
    async with session.post(
        f"{base}/accounts/login/", data=form, headers=headers, allow_redirects=False
    ) as resp:
        if resp.status != 302:
            raise RuntimeError(f"login failed: HTTP {resp.status}")


async def time_page(session: aiohttp.ClientSession, url: str, runs: int) -> dict:
    """TTFB (headers received; Django renders before it sends them) and total, in ms."""
    ttfb, total, size = [], [], 0
    for _ in range(runs):
        start = time.perf_counter()
        async with session.get(url, allow_redirects=False) as resp:
            first = time.perf_counter()
            body = await resp.read()
            end = time.perf_counter()
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}")
        ttfb.append((first - start) * 1000)
        total.append((end - start) * 1000)
        size = len(body)
    return {"ttfb": ttfb, "total": total, "bytes": size}


async def measure_pages(
    base: str, label: str, *, gpu_node: int | None = None, only_gpus: bool = False
) -> list[str]:
    rows = []
    jar = aiohttp.CookieJar(unsafe=True)
    pages = [
        ("login page (baseline, no nodes read)", "/accounts/login/"),
        ("fleet page `/`", "/"),
        ("fleet JSON `/fleet.json`", "/fleet.json"),
        ("filtered page `/?status=offline&search=node-a`", "/?status=offline&search=node-a"),
        ("last page `/?page=last`", "/?page=100000"),
    ]
    if only_gpus:
        pages = [
            ("node page `/nodes/<id>/` (8 GPUs, 4 held by a job)", f"/nodes/{gpu_node}/"),
            ("its GPU rows `/nodes/<id>/gpus.html`", f"/nodes/{gpu_node}/gpus.html"),
        ]
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        await log_in(session, base)
        for name, path in pages:
            if "login" in name:
                # a fresh anonymous session: the login page for someone logged out
                async with aiohttp.ClientSession() as anon:
                    result = await time_page(anon, base + path, PAGE_RUNS)
            else:
                result = await time_page(session, base + path, PAGE_RUNS)
            rows.append(
                f"| {label} | {name} | {median(result['ttfb']):.1f} | "
                f"{percentile(result['ttfb'], 99):.1f} | {median(result['total']):.1f} | "
                f"{result['bytes'] / 1024:.1f} |"
            )
    return rows


def change_and_broadcast(node_ids: list[int], marker: str) -> None:
    """What a sweep does with its changed nodes: UPDATE the rows, then one broadcast."""
    from inventory.live import broadcast_node_changes
    from inventory.models import Node

    Node.objects.filter(pk__in=node_ids).update(status_detail=marker)
    broadcast_node_changes([node.summary() for node in Node.objects.filter(pk__in=node_ids)])


async def measure_live(base: str, clients: int, rounds: int, node_ids: list[int]) -> dict:
    """Latency from the UPDATE to the last of `clients` sockets holding the message."""
    from django.db import connections

    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=60)
    ws_url = base.replace("http://", "ws://") + "/ws/fleet/"
    # limit=0: each WebSocket holds its connection, and aiohttp's default pool stops at 100.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        cookie_jar=jar, timeout=timeout, connector=connector
    ) as session:
        await log_in(session, base)
        sockets = await asyncio.gather(
            *(
                session.ws_connect(ws_url, headers={"Origin": base}, heartbeat=None)
                for _ in range(clients)
            )
        )
        for ws in sockets:
            hello = await ws.receive_json(timeout=10)
            assert hello["type"] == "hello", hello
        arrivals: dict[str, list[float]] = {}

        async def listen(ws: aiohttp.ClientWebSocketResponse) -> None:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                now = time.perf_counter()
                # The marker, without parsing the whole frame: a browser parses in its own
                # process, while these 200 clients share one Python process and its CPU.
                found = MARKER.search(msg.data)
                if found:
                    arrivals.setdefault(found.group(1), []).append(now)

        listeners = [asyncio.create_task(listen(ws)) for ws in sockets]
        last, median_client, lost = [], [], 0
        try:
            for n in range(rounds):
                marker = f"bench-{clients}-{len(node_ids)}-{n}"
                start = time.perf_counter()
                await asyncio.to_thread(change_and_broadcast, node_ids, marker)
                deadline = time.monotonic() + 5
                while len(arrivals.get(marker, ())) < clients and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                got = arrivals.get(marker, [])
                lost += clients - len(got)
                if got:
                    last.append((max(got) - start) * 1000)
                    median_client.append((median(got) - start) * 1000)
                await asyncio.sleep(0.05)
        finally:
            for task in listeners:
                task.cancel()
            await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
            await asyncio.to_thread(connections.close_all)
    return {"last": last, "median_client": median_client, "lost": lost}


def give_gpus(count: int) -> list[int]:
    """The first `count` GPU nodes get 8 GPUs' verdict rows (one GPU of every tenth node
    unhealthy with evidence) and a running Slurm job on 4 of them, as a busy cluster's."""
    from django.utils import timezone

    from contract.verdicts import Evidence, EvidenceSource, HealthAction, HealthState
    from inventory.models import GpuHealth, Node
    from scheduler.models import Job, JobGpu

    now = timezone.now()
    nodes = list(Node.objects.exclude(gpu_vendor="none").order_by("id")[:count])
    rows, jobs = [], []
    for n, node in enumerate(nodes):
        for index in range(8):
            evidence = []
            if n % 10 == 0 and index == 3:
                uuid, words = f"GPU-{node.pk:06d}-{index}", "XID 79: GPU has fallen off the bus"
                item = Evidence(EvidenceSource.XID, "xid:79", words, HealthState.UNHEALTHY,
                                HealthAction.REBOOT, now.timestamp(), str(index), uuid,
                                f"1650{node.pk:06d}{index}")  # fmt: skip
                evidence = [item.as_dict()]
            rows.append(GpuHealth(
                node=node, index=index, uuid=f"GPU-{node.pk:06d}-{index}",
                serial=f"1650{node.pk:06d}{index}", vendor=node.gpu_vendor,
                state=HealthState.UNHEALTHY if evidence else HealthState.HEALTHY,
                action=HealthAction.REBOOT if evidence else HealthAction.NONE,
                evidence=evidence,
            ))  # fmt: skip
        jobs.append(Job(job_id=100000 + n, name="train", user=f"user{n % 40}", state="RUNNING",
                        nodes=[node.hostname], gpu_count=4, started=now))  # fmt: skip
    GpuHealth.objects.bulk_create(rows, batch_size=2000)
    Job.objects.bulk_create(jobs, batch_size=2000)
    by_id = {job.job_id: job for job in Job.objects.filter(job_id__gte=100000)}
    held = [
        JobGpu(job=by_id[100000 + n], node=node, slurm_node=node.hostname, index=i, since=now)
        for n, node in enumerate(nodes)
        for i in range(4)
    ]
    JobGpu.objects.bulk_create(held, batch_size=2000)
    return [node.pk for node in nodes]


async def measure_gpu_polling(base: str, server_pid: int, pages: int, node_ids: list[int]) -> dict:
    """`pages` open node pages for GPU_WINDOW seconds: each reads its GPU rows every
    GPU_POLL s, the reads spread evenly; latencies (ms) and the server's CPU seconds."""
    import psutil

    server = psutil.Process(server_pid)

    def cpu() -> float:
        times = server.cpu_times()
        return times.user + times.system + times.children_user + times.children_system

    def database_cpu() -> float:
        """Every PostgreSQL process's CPU seconds (its backends serve the reads; the
        machine is otherwise quiet, nothing else uses the database meanwhile)."""
        total = 0.0
        for process in psutil.process_iter(["name"]):
            if process.info["name"] in ("postgres", "postmaster"):
                try:
                    times = process.cpu_times()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += times.user + times.system
        return total

    rate = pages / GPU_POLL
    count = int(rate * GPU_WINDOW)
    latencies: list[float] = []
    failed = 0
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as session:
        await log_in(session, base)

        async def one(path: str) -> None:
            nonlocal failed
            start = time.perf_counter()
            async with session.get(base + path) as resp:
                await resp.read()
                if resp.status != 200:
                    failed += 1
            latencies.append((time.perf_counter() - start) * 1000)

        before, db_before, started = cpu(), database_cpu(), time.monotonic()
        tasks = []
        for k in range(count):
            # page k reads at its own moment of the interval, as pages opened at random do
            await asyncio.sleep(max(0.0, started + k / rate - time.monotonic()))
            node = node_ids[k % len(node_ids)]
            tasks.append(asyncio.create_task(one(f"/nodes/{node}/gpus.html")))
        await asyncio.sleep(max(0.0, started + GPU_WINDOW - time.monotonic()))
        await asyncio.gather(*tasks)
        seconds = time.monotonic() - started
        used, db_used = cpu() - before, database_cpu() - db_before
    return {"requests": count, "latencies": latencies, "failed": failed,
            "cpu": used / seconds, "db": db_used / seconds, "seconds": seconds}  # fmt: skip


async def run(args: argparse.Namespace) -> str:
    from inventory.models import Node

    page_rows: list[str] = []
    live_rows: list[str] = []
    env = {"MAC_LOG_LEVEL": "WARNING"}
    await asyncio.to_thread(populate, 1000, 9)
    await asyncio.to_thread(make_operator)
    proc, base = servers.start_uvicorn(env | {"DATABASE_URL": args.db_url})
    try:
        progress("pages with 1,000 nodes")
        page_rows += await measure_pages(base, "1,000")
        progress("adding 9,000 nodes")
        await asyncio.to_thread(populate, 9000, 9, 7, 1000)
        progress("pages with 10,000 nodes")
        page_rows += await measure_pages(base, "10,000")
        ids = await asyncio.to_thread(
            lambda: list(Node.objects.order_by("id").values_list("id", flat=True)[:BIG_BATCH])
        )
        progress(f"GPU rows for {GPU_NODES} nodes, then open node pages reading them")
        gpu_ids = await asyncio.to_thread(give_gpus, GPU_NODES)
        page_rows += await measure_pages(base, "10,000", gpu_node=gpu_ids[0], only_gpus=True)
        polling = {}
        for pages in OPEN_PAGES:
            progress(f"{pages} open node pages, {GPU_WINDOW:.0f} s")
            polling[pages] = await measure_gpu_polling(base, proc.pid, pages, gpu_ids)
        results = {}
        for clients, batch in ((1, 1), (200, 1), (1, BIG_BATCH), (200, BIG_BATCH)):
            progress(f"live updates with {clients} clients, {batch} changes per sweep")
            res = await measure_live(base, clients, args.rounds, ids[:batch])
            results[clients, batch] = res
            live_rows.append(
                f"| {clients} | {batch} | {len(res['last'])} | "
                f"{median(res['median_client']):.1f} | "
                f"{median(res['last']):.1f} | {percentile(res['last'], 99):.1f} | "
                f"{max(res['last']):.1f} | {res['lost']} |"
            )
    finally:
        stop_process(proc)
    p99 = percentile(results[200, 1]["last"], 99)
    p99_big = percentile(results[200, BIG_BATCH]["last"], 99)
    lost = sum(r["lost"] for r in results.values())
    return "\n".join(
        [
            "Fleet page, one uvicorn worker, PostgreSQL, 100 rows per page, "
            f"{PAGE_RUNS} sequential requests each (ms; TTFB = response headers received, "
            "Django renders the whole page before it sends them):",
            "",
            "| nodes | request | TTFB median | TTFB p99 | total median | payload KiB |",
            "|---|---|---|---|---|---|",
            *page_rows,
            "",
            f"Open node pages, each reading its GPU rows every {GPU_POLL:.0f} s as the page "
            f"does (`/nodes/<id>/gpus.html`; {GPU_NODES:,} nodes with 8 GPUs' verdicts, 4 "
            f"held by a running job; 10,000 nodes registered), {GPU_WINDOW:.0f} s each, the "
            "reads spread evenly; the CPU over the window (user + system, cores) of the "
            "server and of PostgreSQL's processes, the row with no open page as the "
            "baseline; CPU per read is both above the baseline:",
            "",
            "| open pages | reads/s | reads | median ms | p95 ms | p99 ms | failed | "
            "server CPU cores | PostgreSQL CPU cores | above baseline | CPU ms per read |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *gpu_rows(polling),
            "",
            f"Live updates: {args.rounds} rounds; each round UPDATEs one node and calls "
            "broadcast_node_changes as the sweep does; latency from just before the UPDATE "
            "to the last WebSocket client holding the message (ms). All clients in one "
            "aiohttp process, one uvicorn worker, Redis channel layer:",
            "",
            "| clients | changes per message | rounds | median client | last client median |"
            " last client p99 | last client max | messages lost |",
            "|---|---|---|---|---|---|---|---|",
            *live_rows,
            "",
            verdict(
                "live update at 200 clients within 1 s",
                "the p99 of the last client, one change per message",
                p99,
                1000,
                " ms",
            ),
            verdict(
                "live update at 200 clients within 1 s",
                f"the p99 of the last client, {BIG_BATCH} changes per message",
                p99_big,
                1000,
                " ms",
            ),
            verdict("no live update lost", "the messages lost in all rows", lost, 0),
            "",
            "The clients find their marker with a regular expression instead of parsing each "
            "frame (a browser parses in its own process; here all clients share one). Load "
            f"average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs, which the "
            "clients, the server, PostgreSQL and Redis all share; the 1-client row is the "
            "baseline from the same run.",
        ]
    )


def gpu_rows(polling: dict[int, dict]) -> list[str]:
    idle = polling[0]["cpu"] + polling[0]["db"]
    rows = []
    for pages, res in polling.items():
        lat = res["latencies"]
        above = res["cpu"] + res["db"] - idle
        per_read = above * res["seconds"] / res["requests"] * 1000 if res["requests"] else None
        rows.append(
            f"| {pages:,} | {pages / GPU_POLL:.1f} | {res['requests']:,} | "
            + (f"{median(lat):.1f} | {percentile(lat, 95):.1f} | {percentile(lat, 99):.1f} | "
               if lat else "- | - | - | ")
            + f"{res['failed']} | {res['cpu']:.3f} | {res['db']:.3f} | {above:+.3f} | "
            + (f"{per_read:.1f} |" if per_read is not None else "- |")
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Dashboard page and live-update benchmark.")
    ap.add_argument("--rounds", type=int, default=WS_ROUNDS, help="live-update rounds")
    ap.add_argument("--no-report", action="store_true", help="print only, do not touch docs/")
    args = ap.parse_args(argv)
    started = time.monotonic()
    with bench_database("mac_bench_dash") as db_url:
        args.db_url = db_url
        body = asyncio.run(run(args))
    body += f"\n\nWhole benchmark: {time.monotonic() - started:.0f} s."
    print(body)
    if not args.no_report:
        update_section("dashboard", "Dashboard: fleet page and live updates", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
