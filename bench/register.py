"""Benchmark: 1,000 agents registering at once against the master's serving stack.

Starts the API server as `mac start master` does (gunicorn with macweb.gunicorn_conf
on a loopback port of its own) behind the master's nginx proxy (`manage.py
proxy_config`, testkit.proxy), against a fresh PostgreSQL database; then, for several
runs, fires 1,000 concurrent GET /health (the baseline: one database and one Redis
round trip) and 1,000 concurrent POST /api/v1/register with distinct hostnames, all
through the proxy, and finally one burst of re-registrations of hosts already known.
Each client sends from an address of its own on 127.0.0.0/8, as agents do from their
own hosts, so the per-address rate limit (MAC_REGISTER_RATE, left at its default) and
the proxy's per-address connection cap apply as they would in a cluster.

It prints, and writes to its section of docs/benchmarks.md, only what this run
measured, and judges the targets on those figures: the API server's CPU per new
registration at most 2.5x its CPU per /health in the same run, no errors, and one row
per host. Exit status 1 when one is missed.

    .venv/bin/python -m bench.register [--agents 1000] [--runs 3] [--workers 2]
        [--client raw|aiohttp] [--no-report] [--profile stacks.txt]

--profile records the API workers with py-spy (raw samples holding the GIL) during
the bursts, for finding where the time goes. Needs PostgreSQL (BENCH_DATABASE_URL,
default postgres://postgres@127.0.0.1:5432/mac_bench_register: created and dropped
here), Redis (BENCH_REDIS_URL) and nginx.
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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import psutil
import psycopg

from bench.report import median, percentile, update_section
from contract.master_api import registration_body
from testkit.ports import free_port
from testkit.proxy import start_proxy, stop_process

ROOT = Path(__file__).resolve().parent.parent
JOIN_TOKEN = "bench-join-token-" + os.urandom(8).hex()


# The target (issue 19): the API server's CPU per new registration, at most this many
# times its CPU per GET /health on the same server in the same run.
CPU_RATIO_TARGET = 2.5


@dataclass
class Burst:
    name: str
    latencies_ms: list[float]
    errors: list[str]
    wall_s: float
    api_cpu_s: float = float("nan")
    proxy_cpu_s: float = float("nan")
    client_cpu_s: float = float("nan")

    @property
    def sent(self) -> int:
        return len(self.latencies_ms) + len(self.errors)

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s else float("nan")

    @property
    def api_cpu_ms(self) -> float:
        """The API server's CPU time per request (gunicorn and its workers)."""
        return self.api_cpu_s * 1000 / self.sent if self.sent else float("nan")

    @property
    def proxy_cpu_ms(self) -> float:
        """nginx's CPU time per request."""
        return self.proxy_cpu_s * 1000 / self.sent if self.sent else float("nan")

    @property
    def client_share(self) -> float:
        """The client's CPU time over the burst as a share of all CPU time spent on it."""
        spent = self.client_cpu_s + self.api_cpu_s + self.proxy_cpu_s
        return self.client_cpu_s / spent if spent else float("nan")

    def row(self, run: str) -> str:
        lat = self.latencies_ms
        return (
            f"| {run} | {self.name} | {self.sent} | {len(self.errors)} | "
            f"{median(lat):.1f} | {percentile(lat, 99):.1f} | {self.rate:.0f} | "
            f"{self.api_cpu_ms:.2f} | {self.proxy_cpu_ms:.2f} | {self.client_share:.0%} |"
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
        DJANGO_SETTINGS_MODULE="macweb.settings",
    )
    for name in ("MAC_TEST_DB_NAME", "MAC_REGISTER_RATE", "MAC_DB_POOL_SIZE"):
        env.pop(name, None)
    return env


# --app: what gunicorn serves plain HTTP with. asgi: macweb.asgi under uvicorn's worker,
# as `mac start master` runs it; wsgi: Django's stock WSGI application (macweb.wsgi) under
# gunicorn's threaded worker with as many threads (MAC_API_THREADS, default 8), the usual
# Channels split where only /ws/ goes to ASGI (macweb/asgi.py says which won).
APPS = {
    "asgi": ["macweb.asgi:application"],
    "wsgi": ["macweb.wsgi:application", "--worker-class", "gthread", "--threads", "8"],
}


def start_server(
    env: dict[str, str], port: int, workers: int, log: Path, app: str = "asgi"
) -> subprocess.Popen:
    """The api-server service as `mac start master` runs it (maccli.master.specs), access log on."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "gunicorn"),
                *APPS[app],
                "-c",
                "python:macweb.gunicorn_conf",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
                "--access-logfile",
                "-",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
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
    """CPU seconds used by a server process and its children (gunicorn, nginx)."""

    def __init__(self, pid: int) -> None:
        self.parent = psutil.Process(pid)

    def total(self) -> float:
        procs = [self.parent, *self.parent.children(recursive=True)]
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


# One request ready to go: sends it and returns (status, body).
Sender = Callable[[], Awaitable[tuple[int, bytes]]]


@asynccontextmanager
async def raw_client(requests: list[Request]) -> AsyncIterator[list[Sender]]:
    """Plain asyncio: one new connection per request, the bytes prepared beforehand."""
    loop = asyncio.get_running_loop()

    def sender(method: str, url: str, body: dict | None, headers: dict, source: str) -> Sender:
        data, parts = raw_request(method, url, body, headers), urlsplit(url)

        async def send() -> tuple[int, bytes]:
            done = loop.create_future()
            await loop.create_connection(
                lambda: _Exchange(data, done), parts.hostname, parts.port, local_addr=(source, 0)
            )
            return await done

        return send

    yield [sender(*request) for request in requests]


@asynccontextmanager
async def aiohttp_client(requests: list[Request]) -> AsyncIterator[list[Sender]]:
    """aiohttp: a connector is bound to one local address, so one session per request."""
    sessions = [
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True, local_addr=(source, 0))
        )
        for *_, source in requests
    ]

    def sender(session, method: str, url: str, body: dict | None, headers: dict, _src) -> Sender:
        async def send() -> tuple[int, bytes]:
            async with session.request(method, url, json=body, headers=headers) as resp:
                return resp.status, await resp.read()

        return send

    try:
        yield [sender(session, *req) for session, req in zip(sessions, requests, strict=True)]
    finally:
        await asyncio.gather(*(session.close() for session in sessions))


CLIENTS = {"raw": raw_client, "aiohttp": aiohttp_client}
CLIENT_WORDS = {
    "raw": "plain asyncio connections sending prepared HTTP/1.1 requests",
    "aiohttp": "aiohttp, one session per client",
}


async def burst(
    name: str,
    requests: list[Request],
    ok: set[int],
    servers: dict[str, ServerCPU],
    client: str = "raw",
    keys: dict[str, str] | None = None,
) -> Burst:
    """Send all requests at once (one connection each, from its own source) and time each.

    Each is timed from its connect to its whole response; the servers' and this
    client's CPU are taken over the whole burst. Node keys found in the responses are
    collected into `keys` (hostname -> key).
    """
    latencies: list[float] = []
    errors: list[str] = []
    start_gate = asyncio.Event()

    async def one(send: Sender) -> None:
        await start_gate.wait()
        began = time.perf_counter()
        try:
            status, raw = await asyncio.wait_for(send(), 120)
        except (OSError, TimeoutError, aiohttp.ClientError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            return
        if status not in ok:
            errors.append(f"{status} {raw[:200].decode(errors='replace')}")
            return
        latencies.append((time.perf_counter() - began) * 1000)
        if keys is not None:
            answer = json.loads(raw)
            if "node_key" in answer:
                keys[answer["hostname"]] = answer["node_key"]

    async with CLIENTS[client](requests) as senders:
        tasks = [asyncio.create_task(one(send)) for send in senders]
        await asyncio.sleep(0.05)
        before = {role: cpu.total() for role, cpu in servers.items()}
        client_before = client_cpu()
        began = time.perf_counter()
        start_gate.set()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - began
        client_used = client_cpu() - client_before
        used = {role: cpu.total() - before[role] for role, cpu in servers.items()}
    return Burst(name, latencies, errors, wall, used["api"], used["proxy"], client_used)


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
        if keys is not None:
            if body["hostname"] not in keys:
                continue  # its first registration failed (counted there): no key to send
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
    base: str, agents: int, runs: int, servers: dict[str, ServerCPU], client: str
) -> tuple[list[tuple[str, Burst]], int]:
    results: list[tuple[str, Burst]] = []
    first_keys: dict[str, str] = {}
    for run in range(1, runs + 1):
        health: list[Request] = [
            ("GET", f"{base}/health", None, {}, source_of(run, i)) for i in range(agents)
        ]
        results.append((str(run), await burst("GET /health", health, {200}, servers, client)))
        regs = registrations(base, run, agents)
        keys = first_keys if run == 1 else None
        new = await burst("POST /register (new)", regs, {201}, servers, client, keys)
        results.append((str(run), new))
    again = registrations(base, 1, agents, first_keys)
    name = "POST /register (again, with key)"
    results.append(("re", await burst(name, again, {200}, servers, client)))
    return results, agents * runs


def cpu_ratios(results: list[tuple[str, Burst]]) -> list[float]:
    """Per run: API CPU per new registration over API CPU per /health of the same run."""
    by_run: dict[str, dict[str, Burst]] = {}
    for run, b in results:
        by_run.setdefault(run, {})[b.name] = b
    return [
        bursts["POST /register (new)"].api_cpu_ms / bursts["GET /health"].api_cpu_ms
        for bursts in by_run.values()
        if {"GET /health", "POST /register (new)"} <= set(bursts)
    ]


SERVED = {
    "asgi": lambda workers: f"macweb.asgi, {workers} uvicorn workers",
    "wsgi": lambda workers: f"macweb.wsgi, {workers} gthread workers of 8 threads",
}


def report(results, expected: int, rows: tuple[int, int, int], args, load: tuple) -> str:
    lines = [
        f"{args.agents} concurrent clients per burst ({CLIENT_WORDS[args.client]}, one "
        "connection each, each from its own 127.x source address) through the master's "
        f"nginx proxy to gunicorn with macweb.gunicorn_conf ({SERVED[args.app](args.workers)}"
        f", access log on) on loopback, {args.runs} runs, PostgreSQL (fresh "
        "database), nginx for the per-address rate limit (default MAC_REGISTER_RATE), Redis "
        "for the per-node-key one and live pushes. "
        "Registrations carry the join token; `GET /health` is the baseline, on the same "
        "server in the same run. `api CPU ms` is the API server's CPU time (gunicorn and "
        "its workers) over the burst per request, `proxy CPU ms` nginx's; `client CPU` "
        "is the bench client's share of all CPU time the client and both servers spent.",
        "",
        "| run | request | n | errors | median ms | p99 ms | req/s | api CPU ms | "
        "proxy CPU ms | client CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [b.row(run) for run, b in results]
    by_name: dict[str, list[Burst]] = {}
    for _, b in results:
        by_name.setdefault(b.name, []).append(b)
    lines.append("")
    for name, bursts in by_name.items():
        mid = median([median(b.latencies_ms) for b in bursts])
        p99 = median([percentile(b.latencies_ms, 99) for b in bursts])
        rate = median([b.rate for b in bursts])
        api = median([b.api_cpu_ms for b in bursts])
        proxy = median([b.proxy_cpu_ms for b in bursts])
        walls = ", ".join(f"{b.wall_s:.1f}" for b in bursts)
        lines.append(
            f"- {name}: median of run medians {mid:.1f} ms, median p99 {p99:.1f} ms, "
            f"median {rate:.0f} req/s, {api:.2f} ms API CPU and {proxy:.2f} ms proxy CPU "
            f"per request; the whole burst, first request to last answer: {walls} s"
        )
    ratios = cpu_ratios(results)
    ratio = median(ratios)
    errors = sum(len(b.errors) for _, b in results)
    total, hosts, ips = rows
    duplicates = total - min(hosts, ips)
    lines += [
        "",
        f"- API CPU per new registration / per /health, each run: "
        f"{', '.join(f'{r:.2f}x' for r in ratios)}; median {ratio:.2f}x: target <= "
        f"{CPU_RATIO_TARGET}x {'met' if ratio <= CPU_RATIO_TARGET else 'MISSED'}",
        f"- errors: {errors}: target 0 {'met' if errors == 0 else 'MISSED'}",
        f"- rows after the bench: {total} (expected {expected}), distinct hostnames {hosts}, "
        f"distinct ips {ips}: {duplicates} duplicates: target 0 "
        f"{'met' if duplicates == 0 and total == expected else 'MISSED'}",
        f"- load average before/after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} "
        "CPUs, which the client, the servers, PostgreSQL and Redis share with other work",
    ]
    return "\n".join(lines)


LOGS = ("proxy.log", "api-server.log")


def problems(log: Path, last: int = 20) -> str:
    """A server log's lines that are neither a 2xx access-log entry nor INFO: what went wrong."""
    if not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    kept = [line for line in lines if '" 20' not in line and "[INFO]" not in line]
    return "\n".join(kept[-last:])


def targets_met(results, expected: int, rows: tuple[int, int, int]) -> bool:
    errors = sum(len(b.errors) for _, b in results)
    total, hosts, ips = rows
    ratio_ok = median(cpu_ratios(results)) <= CPU_RATIO_TARGET
    return ratio_ok and errors == 0 and total == expected == hosts == ips


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
    parser.add_argument(
        "--app",
        choices=sorted(APPS),
        default="asgi",
        help="asgi: macweb.asgi under uvicorn workers (default, as shipped); wsgi: "
        "macweb.wsgi under gunicorn's gthread workers (its own docs section)",
    )
    parser.add_argument("--no-report", action="store_true", help="print, do not write the doc")
    parser.add_argument("--profile", type=Path, help="py-spy collapsed stacks of the workers")
    args = parser.parse_args(argv)

    db_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mac_bench_register"
    )
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")
    recreate_database(db_url)
    api = proxy = None
    try:
        with tempfile.TemporaryDirectory(prefix="mac-bench-") as data_dir:
            env = server_env(db_url, redis_url, data_dir)
            if args.app == "wsgi":
                # gunicorn's own workers do not take the client address from nginx's
                # X-Forwarded-For as uvicorn's do: Django reads it from the proxy instead.
                env["MAC_TRUSTED_PROXIES"] = "127.0.0.1/32"
            for step in (["prepare_master", "-v0"], ["migrate", "--noinput", "-v0"]):
                subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=env, check=True)
            api_port, port = free_port(), free_port()
            base = f"http://127.0.0.1:{port}"
            log = Path(data_dir) / "api-server.log"
            api = start_server(env, api_port, args.workers, log, args.app)
            proxy = start_proxy(Path(data_dir), env, port, api_port)
            asyncio.run(wait_healthy(base, api))
            servers = {"api": ServerCPU(api.pid), "proxy": ServerCPU(proxy.pid)}
            spy = start_profile(api.pid, args.profile) if args.profile else None
            load_before = os.getloadavg()[0]
            results, expected = asyncio.run(
                measure(base, args.agents, args.runs, servers, args.client)
            )
            load_after = os.getloadavg()[0]
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
            rows = count_rows(db_url)
            logs = {name: problems(Path(data_dir) / name) for name in LOGS}
    finally:
        if proxy is not None:
            stop_process(proxy)
        if api is not None and api.poll() is None:
            os.killpg(api.pid, signal.SIGTERM)
            api.wait(timeout=30)
        recreate_database(db_url, drop_only=True)

    body = report(results, expected, rows, args, (load_before, load_after))
    print(body)
    for error in [e for _, b in results for e in b.errors][:5]:
        print("error:", error, file=sys.stderr)
    for name, text in logs.items():
        if text:
            print(f"--- {name}, its warnings and errors (last 20):\n{text}", file=sys.stderr)
    if not args.no_report and args.app == "asgi":
        update_section("register", "Registration: 1,000 agents at once", body)
    elif not args.no_report:
        title = "Registration: 1,000 agents at once, stock WSGI (gthread) for plain HTTP"
        update_section("register-wsgi", title, body)
    return 0 if targets_met(results, expected, rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
