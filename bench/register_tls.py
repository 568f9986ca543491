"""Benchmark: registration over the proxy's HTTPS (28443) against plain HTTP, same run.

The serving stack of bench/register.py (gunicorn with macweb.gunicorn_conf behind the
master's nginx, PostgreSQL, Redis), with HTTPS beside HTTP on the material that
`manage.py prepare_tls` makes (the master's own P-256 CA and server certificate). Each
run fires, one connection per client and each client from its own 127.x address, a
burst of new registrations over HTTP, one over HTTPS verified against the pinned CA
(a full handshake each: an agent registers once), and a burst of `GET /api/v1/ca.pem`
over HTTPS, the extra request of an agent's pin check (nginx answers it alone). The
order of the two registration bursts alternates from run to run.

It writes to its section of docs/benchmarks.md only what it measured: per request,
the API server's and nginx's CPU, the client's, and the ratio of the servers' CPU per
HTTPS registration to per HTTP registration in the same run.

    .venv/bin/python -m bench.register_tls [--agents 300] [--runs 5] [--workers 2]
        [--no-report]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import ssl
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

from bench.register import (
    JOIN_TOKEN,
    Burst,
    Request,
    Sender,
    ServerCPU,
    _Exchange,
    burst,
    raw_request,
    recreate_database,
    server_env,
    start_server,
    wait_healthy,
)
from bench.report import median, update_section
from contract.master_api import registration_body
from contract.pinning import CA_PATH, pinned_context
from testkit.ports import free_port
from testkit.proxy import prepare_tls, start_proxy, stop_process

ROOT = Path(__file__).resolve().parent.parent
HTTP, HTTPS, CA = "POST /register (HTTP)", "POST /register (HTTPS)", f"GET {CA_PATH} (HTTPS)"


def tls_client(context: ssl.SSLContext):
    """bench.register's raw client, over TLS verified with `context` (what agents trust)."""

    @asynccontextmanager
    async def client(requests: list[Request]) -> AsyncIterator[list[Sender]]:
        loop = asyncio.get_running_loop()

        def sender(method: str, url: str, body, headers: dict, source: str) -> Sender:
            data, parts = raw_request(method, url, body, headers), urlsplit(url)
            secure = context if parts.scheme == "https" else None

            async def send() -> tuple[int, bytes]:
                done = loop.create_future()
                await loop.create_connection(
                    lambda: _Exchange(data, done),
                    parts.hostname,
                    parts.port,
                    local_addr=(source, 0),
                    ssl=secure,
                    server_hostname=parts.hostname if secure else None,
                )
                return await done

            return send

        yield [sender(*request) for request in requests]

    return client


def sources(burst_no: int, agents: int) -> list[str]:
    """One loopback address per client, none used twice in the whole bench (rate limit)."""
    return [f"127.{burst_no + 1}.{i // 250}.{i % 250 + 1}" for i in range(agents)]


def registrations(base: str, burst_no: int, agents: int) -> list[Request]:
    out = []
    for i, source in enumerate(sources(burst_no, agents)):
        body = registration_body(
            f"bench-tls-b{burst_no}-{i:05d}",
            source,
            {"sys-exporter": 29101, "dcgm-exporter": 29150},
            gpu_vendor="nvidia",
            gpu_count=8,
            agent_version="bench",
        )
        headers = {"Authorization": f"Bearer {JOIN_TOKEN}"}
        out.append(("POST", f"{base}/api/v1/register", body, headers, source))
    return out


async def measure(
    http: str, https: str, agents: int, runs: int, servers: dict, context: ssl.SSLContext
) -> list[tuple[str, Burst]]:
    from bench import register

    register.CLIENTS["tls"] = tls_client(context)
    results: list[tuple[str, Burst]] = []
    burst_no = 0
    for run in range(1, runs + 1):
        order = [(HTTP, http), (HTTPS, https)]
        if run % 2 == 0:
            order.reverse()
        for name, base in order:
            burst_no += 1
            regs = registrations(base, burst_no, agents)
            results.append((str(run), await burst(name, regs, {201}, servers, "tls")))
        burst_no += 1
        fetches: list[Request] = [
            ("GET", f"{https}{CA_PATH}", None, {}, source) for source in sources(burst_no, agents)
        ]
        results.append((str(run), await burst(CA, fetches, {200}, servers, "tls")))
    return results


def server_ms(b: Burst) -> float:
    """The API server's and nginx's CPU per request, together."""
    return b.api_cpu_ms + b.proxy_cpu_ms


def ratios(results: list[tuple[str, Burst]]) -> list[float]:
    by_run: dict[str, dict[str, Burst]] = {}
    for run, b in results:
        by_run.setdefault(run, {})[b.name] = b
    return [server_ms(bursts[HTTPS]) / server_ms(bursts[HTTP]) for bursts in by_run.values()]


def report(results: list[tuple[str, Burst]], args, load: tuple[float, float]) -> str:
    lines = [
        f"{args.agents} concurrent clients per burst (plain asyncio connections sending "
        "prepared HTTP/1.1 requests, one connection each, each from its own 127.x address) "
        f"through the master's nginx to gunicorn with macweb.gunicorn_conf ({args.workers} "
        f"uvicorn workers) on loopback, {args.runs} runs, PostgreSQL (fresh database) and "
        "Redis. HTTPS: TLS 1.3 with the master's own P-256 CA and server certificate "
        "(`manage.py prepare_tls`), verified by the client against that CA alone, a full "
        "handshake per connection. `api`/`proxy CPU ms`: the API server's / nginx's CPU "
        "time over the burst per request; `client CPU ms`: the bench client's.",
        "",
        "| run | request | n | errors | median ms | req/s | api CPU ms | proxy CPU ms | "
        "client CPU ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run, b in results:
        client_ms = b.client_cpu_s * 1000 / b.sent if b.sent else float("nan")
        lines.append(
            f"| {run} | {b.name} | {b.sent} | {len(b.errors)} | {median(b.latencies_ms):.1f} | "
            f"{b.rate:.0f} | {b.api_cpu_ms:.2f} | {b.proxy_cpu_ms:.2f} | {client_ms:.2f} |"
        )
    lines.append("")
    by_name: dict[str, list[Burst]] = {}
    for _, b in results:
        by_name.setdefault(b.name, []).append(b)
    for name, bursts in by_name.items():
        mid = median([median(b.latencies_ms) for b in bursts])
        api = median([b.api_cpu_ms for b in bursts])
        proxy = median([b.proxy_cpu_ms for b in bursts])
        client = median([b.client_cpu_s * 1000 / b.sent for b in bursts])
        lines.append(
            f"- {name}: median of run medians {mid:.1f} ms; median per request {api:.2f} ms "
            f"API CPU, {proxy:.2f} ms nginx CPU, {client:.2f} ms client CPU"
        )
    each = ratios(results)
    errors = sum(len(b.errors) for _, b in results)
    lines += [
        "",
        "- servers' CPU (API server + nginx) per HTTPS registration / per HTTP registration, "
        f"each run: {', '.join(f'{r:.2f}x' for r in each)}; median {median(each):.2f}x",
        f"- errors: {errors}",
        f"- load average before/after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} "
        "CPUs, shared by the client, the servers, PostgreSQL and Redis",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-report", action="store_true", help="print, do not write the doc")
    args = parser.parse_args(argv)
    if args.runs * 3 + 1 > 253:
        parser.error("--runs: at most 84 (one 127.x block of addresses per burst)")

    db_url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mac_bench_register_tls"
    )
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/1")
    recreate_database(db_url)
    api = proxy = None
    try:
        with tempfile.TemporaryDirectory(prefix="mac-bench-tls-") as data_dir:
            env = server_env(db_url, redis_url, data_dir)
            for step in (["prepare_master", "-v0"], ["migrate", "--noinput", "-v0"]):
                subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=env, check=True)
            prepare_tls(env)
            context = pinned_context((Path(data_dir) / "tls" / "ca.pem").read_bytes())
            api_port, http_port, tls_port = free_port(), free_port(), free_port()
            http, https = f"http://127.0.0.1:{http_port}", f"https://127.0.0.1:{tls_port}"
            api = start_server(env, api_port, args.workers, Path(data_dir) / "api-server.log")
            proxy = start_proxy(Path(data_dir), env, http_port, api_port, tls_port)
            asyncio.run(wait_healthy(http, api))
            servers = {"api": ServerCPU(api.pid), "proxy": ServerCPU(proxy.pid)}
            load_before = os.getloadavg()[0]
            results = asyncio.run(measure(http, https, args.agents, args.runs, servers, context))
            load_after = os.getloadavg()[0]
    finally:
        if proxy is not None:
            stop_process(proxy)
        if api is not None and api.poll() is None:
            os.killpg(api.pid, signal.SIGTERM)
            api.wait(timeout=30)
        recreate_database(db_url, drop_only=True)

    body = report(results, args, (load_before, load_after))
    print(body)
    for error in [e for _, b in results for e in b.errors][:5]:
        print("error:", error, file=sys.stderr)
    if not args.no_report:
        update_section("register_tls", "Registration over HTTPS against HTTP", body)
    return 0 if all(not b.errors for _, b in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
