"""Stand-ins for what the service checks ask: agent services as real HTTP servers on
loopback addresses of their own, the resolver of a bridge, a namespace's route table."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROUTE_HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
EXPOSITION = b"# HELP up Whether the exporter is up.\n# TYPE up gauge\nup 1\n"


class Liveness(BaseHTTPRequestHandler):
    """An agent service's liveness URL: a Prometheus page on /metrics, 200 elsewhere."""

    def do_GET(self) -> None:
        body = EXPOSITION if self.path.endswith("/metrics") else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def service_at(address: str) -> Iterator[int]:
    """A service answering on `address` alone, on a free port; yields the port."""
    server = ThreadingHTTPServer((address, 0), Liveness)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def routes(*lines: tuple[str, str, str, int]) -> str:
    """/proc/net/route's text: (interface, destination, gateway, metric) as dotted quads,
    written as the kernel does (little-endian hex, flags RTF_UP plus RTF_GATEWAY)."""

    def hex_of(address: str) -> str:
        return socket.inet_aton(address)[::-1].hex().upper()

    rows = []
    for iface, destination, gateway, metric in lines:
        flags = "0003" if gateway != "0.0.0.0" else "0001"
        mask = "00000000" if destination == "0.0.0.0" else "00FFFFFF"
        rows.append(
            f"{iface}\t{hex_of(destination)}\t{hex_of(gateway)}\t{flags}\t0\t0\t{metric}\t"
            f"{mask}\t0\t0\t0\n"
        )
    return ROUTE_HEAD + "".join(rows)


def lookup_in(names: dict[str, str]) -> Callable[[str], str]:
    """A resolver that knows `names` and answers every other one as the libc does."""

    def lookup(name: str) -> str:
        if name not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return names[name]

    return lookup
