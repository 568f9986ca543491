"""Benchmark: 1,000 agents registering at once against the real master.

Starts gunicorn with MAC's own configuration (macweb.gunicorn_conf, the production
server) on a free loopback port against a fresh PostgreSQL database, then, for
several runs, fires 1,000 concurrent GET /health (the baseline: one database and one
Redis round trip) and 1,000 concurrent POST /api/v1/register with distinct hostnames,
and finally one burst of re-registrations of hosts already known. Each client sends
from an address of its own on 127.0.0.0/8, as agents do from their own hosts, so the
per-address rate limit (MAC_REGISTER_RATE, left at its default) applies as it would in
a cluster. Every response must succeed and the inventory must end with exactly one
row per host.

    .venv/bin/python -m bench.register [--agents 1000] [--runs 3] [--workers 2]
        [--profile stacks.txt]

--profile records the workers with py-spy (collapsed stacks, `pip install py-spy`)
during the bursts, for finding where the time goes. Needs PostgreSQL
(BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/mac_bench_register:
created and dropped here) and Redis (BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psutil
import psycopg

from bench.report import median, percentile, update_section
from contract.master_api import registration_body
from testkit.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
JOIN_TOKEN = "bench-join-token-" + os.urandom(8).hex()


@dataclass
class Burst:
    name: str
    latencies_ms: list[float]
    errors: list[str]
    wall_s: float
    server_cpu_s: float = float("nan")
    client_cpu_s: float = float("nan")

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s else float("nan")

    @property
    def cpu_ms(self) -> float:
        """The server's CPU time per request (its workers', the client's excluded)."""
        n = len(self.latencies_ms) + len(self.errors)
        return self.server_cpu_s * 1000 / n if n else float("nan")

    @property
    def client_share(self) -> float:
        """The client's CPU time over the burst as a share of all CPU time spent on it."""
        spent = self.client_cpu_s + self.server_cpu_s
        return self.client_cpu_s / spent if spent else float("nan")

    def row(self, run: str) -> str:
        lat = self.latencies_ms
        return (
            f"| {run} | {self.name} | {len(lat) + len(self.errors)} | {len(self.errors)} | "
            f"{median(lat):.1f} | {percentile(lat, 99):.1f} | {self.rate:.0f} | "
            f"{self.cpu_ms:.2f} | {self.client_share:.0%} |"
        )


def admin_url(db_url: str) -> tuple[str, str]:
    """(URL of the server's maintenance database, name of the bench database)."""
    parts = urlsplit(db_url)
    name = parts.path.lstrip("/")
    return urlunsplit(parts._replace(path="/postgres")), name


def recreate_database(db_url: str, drop_only: bool = False) -> None:
    maintenance, name = admin_url(db_url)
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def server_env(db_url: str, redis_url: str, data_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        MAC_REDIS_URL=redis_url,
        MAC_DATA_DIR=data_dir,
        MAC_JOIN_TOKEN=JOIN_TOKEN,
        MAC_MAX_NODES="1000000",
        MAC_LOG_LEVEL="WARNING",
        MAC_NODE_NETWORKS="127.0.0.0/8",
    )
    for name in ("MAC_TEST_DB_NAME", "MAC_REGISTER_RATE", "MAC_DB_POOL_SIZE"):
        env.pop(name, None)
    return env


def start_server(env: dict[str, str], port: int, workers: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "macweb.asgi:application",
            # Worker class, timeouts and limits: the file every runtime uses.
            "-c",
            "python:macweb.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--backlog",
            "4096",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


async def wait_healthy(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn exited with {proc.returncode} before answering")
            try:
                async with session.get(f"{base}/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{base}/health did not answer 200 within {timeout:.0f} s")


# method, url, JSON body, headers, source address
Request = tuple[str, str, dict | None, dict[str, str], str]


def source_of(run: int, i: int) -> str:
    """The loopback address client `i` of burst `run` sends from (and registers)."""
    return f"127.{run + 1}.{i // 250}.{i % 250 + 1}"


class ServerCPU:
    """CPU seconds used by the gunicorn workers (children of the arbiter), client excluded."""

    def __init__(self, pid: int) -> None:
        self.arbiter = psutil.Process(pid)

    def total(self) -> float:
        procs = [self.arbiter, *self.arbiter.children(recursive=True)]
        seconds = 0.0
        for proc in procs:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            seconds += times.user + times.system
        return seconds


def client_cpu() -> float:
    """CPU seconds this (client) process has used so far, all threads."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


class _Exchange(asyncio.Protocol):
    """One request on one fresh connection: send the bytes, read one response.

    The response is complete when its headers and Content-Length bytes of body are in
    (the point aiohttp's resp.read() returns), so latencies compare with aiohttp's.
    """

    def __init__(self, request: bytes, done: asyncio.Future) -> None:
        self.request, self.done = request, done
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0 or self.done.done():
            return
        head = bytes(self.buffer[:head_end]).decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = bytes(self.buffer[head_end + 4 :])
        if len(body) >= length:
            self.done.set_result((int(head[0].split()[1]), body[:length]))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        if not self.done.done():
            self.done.set_exception(exc or ConnectionResetError("closed before a full response"))


def raw_request(method: str, url: str, body: dict | None, headers: dict[str, str]) -> bytes:
    """The HTTP/1.1 request aiohttp would send for the same call (Connection: close)."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {parts.path} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += ["Accept: */*", "Accept-Encoding: gzip, deflate", "User-Agent: bench.register"]
    lines += ["Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def raw_burst(
    name: str,
    requests: list[Request],
    ok: set[int],
    keys: dict[str, str] | None = None,
    cpu: ServerCPU | None = None,
) -> Burst:
    """aiohttp_burst(), with plain asyncio connections instead of 1,000 aiohttp sessions.

    The same requests (bytes prepared before the start, as aiohttp prepares its
    sessions), one new connection each from its own source address, timed from the
    connect to the whole response.
    """
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors: list[str] = []
    start_gate = asyncio.Event()
    prepared = [(raw_request(m, u, b, h), b, s) for m, u, b, h, s in requests]
    host, port = urlsplit(requests[0][1]).hostname, urlsplit(requests[0][1]).port

    async def one(request: bytes, body: dict | None, source: str) -> None:
        await start_gate.wait()
        began = time.perf_counter()
        done = loop.create_future()
        try:
            await loop.create_connection(
                lambda: _Exchange(request, done), host, port, local_addr=(source, 0)
            )
            status, raw = await asyncio.wait_for(done, 120)
        except (OSError, TimeoutError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            return
        if status in ok:
            latencies.append((time.perf_counter() - began) * 1000)
            if keys is not None and body is not None:
                answer = json.loads(raw)
                if "node_key" in answer:
                    keys[answer["hostname"]] = answer["node_key"]
        else:
            errors.append(f"{status} {raw[:200].decode(errors='replace')}")

    tasks = [asyncio.create_task(one(*req)) for req in prepared]
    await asyncio.sleep(0.05)
    cpu_before = cpu.total() if cpu else float("nan")
    client_before = client_cpu()
    began = time.perf_counter()
    start_gate.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - began
    client_used = client_cpu() - client_before
    cpu_used = cpu.total() - cpu_before if cpu else float("nan")
    return Burst(name, latencies, errors, wall, cpu_used, client_used)


async def aiohttp_burst(
    name: str,
    requests: list[Request],
    ok: set[int],
    keys: dict[str, str] | None = None,
    cpu: ServerCPU | None = None,
) -> Burst:
    """Send all requests at once (one connection each, from its own source) and time each.

    Node keys found in the responses are collected into `keys` (hostname -> key).
    """
    timeout = aiohttp.ClientTimeout(total=120)
    latencies: list[float] = []
    errors: list[str] = []
    start_gate = asyncio.Event()
    # A connector is bound to one local address: one session per source address.
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True, local_addr=(source, 0)),
            timeout=timeout,
        )
        for *_, source in requests
    ]

    async def one(session, method: str, url: str, body: dict | None, headers: dict, _src) -> None:
        await start_gate.wait()
        began = time.perf_counter()
        try:
            async with session.request(method, url, json=body, headers=headers) as resp:
                raw = await resp.read()
                if resp.status in ok:
                    latencies.append((time.perf_counter() - began) * 1000)
                    if keys is not None and body is not None:
                        answer = json.loads(raw)
                        if "node_key" in answer:
                            keys[answer["hostname"]] = answer["node_key"]
                else:
                    errors.append(f"{resp.status} {raw[:200].decode(errors='replace')}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    try:
        tasks = [
            asyncio.create_task(one(session, *req))
            for session, req in zip(sessions, requests, strict=True)
        ]
        await asyncio.sleep(0.05)
        cpu_before = cpu.total() if cpu else float("nan")
        client_before = client_cpu()
        began = time.perf_counter()
        start_gate.set()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - began
        client_used = client_cpu() - client_before
        cpu_used = cpu.total() - cpu_before if cpu else float("nan")
    finally:
        await asyncio.gather(*(session.close() for session in sessions))
    return Burst(name, latencies, errors, wall, cpu_used, client_used)


def registrations(
    base: str, run: int, agents: int, keys: dict[str, str] | None = None
) -> list[Request]:
    out = []
    for i in range(agents):
        source = source_of(run, i)
        body = registration_body(
            f"bench-r{run}-{i:05d}",
            source,
            {"sys-exporter": 29101, "dcgm-exporter": 29150},
            gpu_vendor="nvidia",
            gpu_count=8,
            agent_version="bench",
            labels={"run": str(run)},
        )
        headers = {"Authorization": f"Bearer {JOIN_TOKEN}"}
        if keys:
            # What `mac start agent` sends once it holds a key.
            headers["X-MAC-Node-Key"] = keys[body["hostname"]]
        out.append(("POST", f"{base}/api/v1/register", body, headers, source))
    return out


def count_rows(db_url: str) -> tuple[int, int, int]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT count(*) FROM inventory_node").fetchone()[0]
        hosts = conn.execute("SELECT count(DISTINCT hostname) FROM inventory_node").fetchone()[0]
        ips = conn.execute("SELECT count(DISTINCT ip) FROM inventory_node").fetchone()[0]
    return rows, hosts, ips


async def measure(
    base: str, agents: int, runs: int, cpu: ServerCPU, client: str = "raw"
) -> tuple[list[tuple[str, Burst]], int]:
    burst = CLIENTS[client]
    results: list[tuple[str, Burst]] = []
    first_keys: dict[str, str] = {}
    for run in range(1, runs + 1):
        health: list[Request] = [
            ("GET", f"{base}/health", None, {}, source_of(run, i)) for i in range(agents)
        ]
        results.append((str(run), await burst("GET /health", health, {200}, cpu=cpu)))
        regs = registrations(base, run, agents)
        keys = first_keys if run == 1 else None
        new = await burst("POST /register (new)", regs, {201}, keys, cpu=cpu)
        results.append((str(run), new))
    again = registrations(base, 1, agents, first_keys)
    results.append(("re", await burst("POST /register (again, with key)", again, {200}, cpu=cpu)))
    return results, agents * runs


CLIENTS = {"raw": raw_burst, "aiohttp": aiohttp_burst}
CLIENT_WORDS = {
    "raw": "plain asyncio connections sending prepared HTTP/1.1 requests",
    "aiohttp": "aiohttp, one session per client",
}


def report(results, expected: int, rows: tuple[int, int, int], args, load: tuple) -> str:
    lines = [
        f"{args.agents} concurrent clients per burst ({CLIENT_WORDS[args.client]}, one "
        "connection each, each from its own 127.x source address) against gunicorn with "
        f"macweb.gunicorn_conf ({args.workers} uvicorn workers) on loopback, PostgreSQL "
        "(fresh database), Redis for the rate limit (default MAC_REGISTER_RATE, per "
        "address) and live pushes. "
        "Registrations carry the join token; `GET /health` (one database and one Redis "
        "round trip) is the baseline, measured on the same server in the same run. "
        "`server CPU ms` is the workers' CPU time over the burst per request; `client "
        "CPU` the bench client's share of all CPU time the client and the workers spent "
        "on the burst.",
        "",
        "| run | request | n | errors | median ms | p99 ms | req/s | server CPU ms | client CPU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [burst.row(run) for run, burst in results]
    by_name: dict[str, list[Burst]] = {}
    for _, b in results:
        by_name.setdefault(b.name, []).append(b)
    lines.append("")
    for name, bursts in by_name.items():
        mid = median([median(b.latencies_ms) for b in bursts])
        p99 = median([percentile(b.latencies_ms, 99) for b in bursts])
        rate = median([b.rate for b in bursts])
        cpu_ms = median([b.cpu_ms for b in bursts])
        share = median([b.client_share for b in bursts])
        lines.append(
            f"- {name}: median of run medians {mid:.1f} ms, median p99 {p99:.1f} ms, "
            f"median {rate:.0f} req/s, {cpu_ms:.2f} ms server CPU per request, "
            f"client {share:.0%} of the CPU"
        )
    errors = sum(len(b.errors) for _, b in results)
    total, hosts, ips = rows
    lines.append(
        f"- errors: {errors}; rows after the bench: {total} (expected {expected}), distinct "
        f"hostnames {hosts}, distinct ips {ips}: {total - hosts} duplicates"
    )
    lines.append(
        f"- load average before/after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs "
        "shared with other work; client and server share those CPUs, so absolute numbers "
        "understate a dedicated master."
    )
    lines += ["", CHANGES]
    return "\n".join(lines)


CHANGES = """\
Where the time went (issue 13), found with `--profile` (py-spy, samples holding the GIL,
both workers, whole bench) before and after each change; kept only what the profile and
the bench showed. Baselines: 133 req/s and p99 7.2 s for new registrations before the
first pass; 260 req/s, p99 3.6 s, 4.1 ms worker CPU after it (load ~7); at the start of
this pass, under the profiler, 185 req/s, p99 5.1 s, 4.05 ms (load 5-7).

- **ASGI worker setup.** First pass: Django gave every request a thread of its own
  (1,000 threads per worker per burst, ~30% of the samples); requests now share
  MAC_API_THREADS (8) threads per worker and the URLconf loads at start. This pass:
  Django's handler still sent request_started and request_finished through a hop each
  to asgiref's one shared thread and ran every request as two more tasks (~20% of the
  samples: the event loop's share went from 47% to 20%). `macweb/asgi.py` now serves a
  request with one hop: signals, middleware, view and close() in the same thread.
- **Serializer cost.** First pass: response serializers built once per process
  (`node_detail_data`). This pass: building the request serializer's fields (DRF
  deep-copies them per instance) was ~11% of the samples; one serializer per request
  thread validates the body (`validated_body`), ~2%. A refused body is checked again by
  a new serializer, so the 400s are DRF's, message for message.
- **Queries per registration.** A new node: 7 round trips at first, 6 after the first
  pass (one locking SELECT for both candidates), 5 now: pool check, BEGIN, INSERT node
  ... ON CONFLICT DO NOTHING, INSERT event, COMMIT. A registration without a node key
  inserts first and looks up (and locks) only when the hostname or address is taken;
  the lookup and its ORM compilation were ~12% of the samples. New registrations
  3.8 -> 2.4 ms worker CPU under the profiler. A re-registration (with its key) keeps
  the lookup, an UPDATE, its event and the query for its 20 latest events: ~4.5 ms.
- **The per-request push.** Coalesced in the first pass: one message per 200 ms
  window, on commit (`inventory.live.queue_node_changes`); now ~0.5% of the samples.
- **Rate-limit round trips.** One Redis transaction per request (issue 11), ~4%.
- **Left as they are.** psycopg's check of each pooled connection (~1% of the samples
  and a round trip; Django passes the check to the pool itself, and the outage
  recovery relies on it); DRF's renderer and content negotiation (~3%) and the
  middleware the agent endpoints do not use (~3%): small, and a plain JsonResponse
  would change headers. Worker count: 3 workers gave no clear gain in the first pass.
  synchronous_commit stays on (durability).

- **Third pass: compiled statements.** Compiling the ORM's queries was ~20% of a
  re-registration's samples (lookup, UPDATE, event INSERT, the 20 latest events):
  `inventory.services.statements` compiles each from its queryset once per process and
  then only passes parameters (inserts and updates write what save() writes).
  Re-registration 3.6-4.0 -> ~3.0 ms worker CPU, p99 ~4 -> ~2.5 s.
- **Third pass: fewer round trips.** On PostgreSQL a new node and its 'registered'
  event go in as one statement (INSERT ... ON CONFLICT DO NOTHING inside a WITH, the
  event inserted from its RETURNING): 4 round trips (pool check, BEGIN, the insert,
  COMMIT); SQLite keeps two inserts. The rate limit is one Redis script (EVALSHA)
  instead of a MULTI/EXEC of three commands (~4% of the samples before).
- **Third pass: the client.** The bench client's CPU over each burst, against the
  workers': with aiohttp (1,000 sessions) 14% for registrations and 22% for /health,
  so part of p99 was the client's. The client is now plain asyncio connections sending
  the same HTTP/1.1 request from the same 127.x addresses, timed the same way (connect
  to the whole body): 8% and 12%. Like for like, for the registrations and the /health
  baseline both; `--client aiohttp` runs the old one. Back to back before this pass's
  server changes (load 1-3): new registrations p99 2.31 s with aiohttp, 2.08 s with
  the plain client.
- **Third pass: left.** The pool check, DRF's renderer (~1.6%) and the middleware
  (~4%: whitenoise, axes, sessions, CSRF, auth run for agents too), for the reasons
  above. MAC_API_THREADS 4 vs 8 and 3 workers vs 2: within the noise at load 4-7,
  defaults kept.

Re-registrations (lookup, UPDATE, event, 20 latest events: 6 round trips) stay the
slowest at ~2.5 s p99; a lighter response body would need a change to the documented
API (the schema, docs/api.md and `mac`), not made here."""


def start_profile(pid: int, out: Path) -> subprocess.Popen:
    """py-spy sampling the arbiter and its workers until SIGINT (collapsed stacks)."""
    spy = ROOT / ".venv" / "bin" / "py-spy"
    command = [str(spy), "record", "--pid", str(pid), "--subprocesses", "--format", "raw"]
    command += ["--gil", "--rate", "100", "--output", str(out)]
    proc = subprocess.Popen(command, cwd=ROOT)
    time.sleep(1.0)  # py-spy attaches to every process before the first burst
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="raw",
        help="raw: plain asyncio connections (default); aiohttp: one session per client",
    )
    parser.add_argument("--no-report", action="store_true", help="print, do not write the doc")
    parser.add_argument("--profile", type=Path, help="py-spy collapsed stacks of the workers")
    args = parser.parse_args(argv)

    db_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mac_bench_register"
    )
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")
    recreate_database(db_url)
    proc = None
    try:
        with tempfile.TemporaryDirectory(prefix="mac-bench-") as data_dir:
            env = server_env(db_url, redis_url, data_dir)
            for step in (["prepare_master", "-v0"], ["migrate", "--noinput", "-v0"]):
                subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=env, check=True)
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            proc = start_server(env, port, args.workers)
            asyncio.run(wait_healthy(base, proc))
            spy = start_profile(proc.pid, args.profile) if args.profile else None
            load_before = os.getloadavg()[0]
            results, expected = asyncio.run(
                measure(base, args.agents, args.runs, ServerCPU(proc.pid), args.client)
            )
            load_after = os.getloadavg()[0]
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            rows = count_rows(db_url)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        recreate_database(db_url, drop_only=True)

    body = report(results, expected, rows, args, (load_before, load_after))
    print(body)
    failed = [e for _, b in results for e in b.errors]
    for error in failed[:5]:
        print("error:", error, file=sys.stderr)
    ok = not failed and rows[0] == expected and rows[0] == rows[1] == rows[2]
    if not args.no_report:
        update_section("register", "Registration: 1,000 agents at once", body)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
