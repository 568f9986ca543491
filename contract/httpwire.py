"""One HTTP/1.1 exchange with an exporter, on the wire, and how its answer is judged.

The probe (contract.liveness) sends a fixed GET over a bare asyncio transport and
reads at most READ_CAP bytes; this module holds that exchange and the rules that
turn the bytes into an Outcome: a status line, then for `/metrics` a body whose
first complete lines must be Prometheus text. A compiled regular expression over a
few lines, not prometheus_client's parser: at 10,000 nodes every 100 microseconds
per body is a second of sweep time.
"""

from __future__ import annotations

import asyncio
import re

from contract.outcomes import Outcome
from contract.services import Service

READ_CAP = 8192  # bytes of an answer read (head and body); the check needs the first lines
CHECK_LINES = 20  # complete exposition lines the validity check looks at
USER_AGENT = "mac-master-probe/1"

# A sample line of the Prometheus text format: name, optional labels, a value.
_SAMPLE = re.compile(
    rb"[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?[ \t]+"
    rb"(?:[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|inf|NaN|nan))"
    rb"(?:[ \t]+-?[0-9]+)?[ \t]*"
)


def looks_like_exposition(body: bytes, truncated: bool) -> bool:
    """True when the first complete lines of `body` are Prometheus text format.

    Only whole lines are checked: a body cut at READ_CAP ends mid-line.
    """
    lines = body.split(b"\n")
    if truncated:
        lines = lines[:-1]
    checked = [line.rstrip(b"\r") for line in lines[:CHECK_LINES]]
    try:
        b"\n".join(checked).decode("utf-8")
    except UnicodeDecodeError:
        return False
    samples = 0
    headers = 0
    for line in checked:
        if not line.strip():
            continue
        if line.startswith(b"#"):
            headers += line.startswith((b"# HELP ", b"# TYPE "))
            continue
        if not _SAMPLE.fullmatch(line):
            return False
        samples += 1
    # Only comments in the checked lines is fine if they are HELP/TYPE lines.
    return samples > 0 or headers > 0


_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*([0-9]+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[ \t]*chunked", re.IGNORECASE)


class HttpExchange(asyncio.Protocol):
    """Send one GET, collect at most READ_CAP bytes of the answer, report when complete.

    Complete means: the server closed, READ_CAP bytes arrived, Content-Length
    bytes of body arrived, or the last chunk of a chunked body arrived. The
    request says `Connection: close`, but a server that keeps the connection
    open anyway must not turn a full answer into a timeout.
    """

    __slots__ = (
        "buffer", "cap", "chunked", "done", "expected", "request", "transport", "truncated",
    )  # fmt: skip

    def __init__(self, request: bytes, done: asyncio.Future, cap: int = READ_CAP) -> None:
        self.request = request
        self.done = done
        self.cap = cap
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.truncated = False
        self.expected: int | None = None  # total bytes once the head says so
        self.chunked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= self.cap:
            # Enough to judge; the rest of a large page is not our business.
            self.truncated = True
            del self.buffer[self.cap :]
            self._finish()
            return
        if self.expected is None and not self.chunked:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(self.buffer[:head_end])
            length = _CONTENT_LENGTH.search(head)
            if length:
                self.expected = head_end + 4 + int(length.group(1))
            else:
                self.chunked = _CHUNKED.search(head) is not None
        if (self.expected is not None and len(self.buffer) >= self.expected) or (
            self.chunked and self.buffer.endswith(b"\r\n0\r\n\r\n")
        ):
            self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _dechunk(body: bytes) -> tuple[bytes, bool]:
    """Decode the chunks of a chunked body prefix; the bool says a chunk was cut."""
    out = bytearray()
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            return bytes(out), True
        try:
            size = int(body[position:line_end].split(b";", 1)[0], 16)
        except ValueError:
            raise ValueError("bad chunk size in chunked body") from None
        if size == 0:
            return bytes(out), False
        start = line_end + 2
        out += body[start : start + size]
        if start + size > len(body):
            return bytes(out), True
        position = start + size + 2


def answer_body(raw: bytes, truncated: bool) -> tuple[bytes, bool]:
    """The body of a raw answer whose head is complete, de-chunked; the bool says it was cut.

    ValueError for a broken chunked encoding.
    """
    head_end = raw.find(b"\r\n\r\n")
    head, body = raw[:head_end], raw[head_end + 4 :]
    if _CHUNKED.search(head):
        body, cut = _dechunk(body)
        truncated = truncated or cut
    return body, truncated


def judge_answer(service: Service, raw: bytes, truncated: bool) -> tuple[Outcome, int | None, str]:
    """Classify a raw HTTP/1.x answer: status line, then (for /metrics) the body."""
    head_end = raw.find(b"\r\n\r\n")
    if not raw:
        return Outcome.ERROR, None, "connection closed without an answer"
    status_line = raw.split(b"\r\n", 1)[0]
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return Outcome.ERROR, None, "not an HTTP response"
    status = int(parts[1])
    if status != 200:
        return Outcome.HTTP_STATUS, status, f"HTTP {status} from {service.liveness_path}"
    if head_end < 0:
        return Outcome.ERROR, status, "incomplete HTTP response head"
    if not service.liveness_path.endswith("/metrics"):
        return Outcome.OK, status, ""
    try:
        body, truncated = answer_body(raw, truncated)
    except ValueError:
        return Outcome.BAD_BODY, status, "broken chunked encoding"
    if service.probe_query and not body.strip() and not truncated:
        # Asked for a few names only (the verdict lines): an exporter that cannot judge
        # (no GPU library, no GPUs) rightly has none of them, and an empty exposition is
        # a valid one. The exporter answered; there is simply no verdict to read.
        return Outcome.OK, status, ""
    if not looks_like_exposition(body, truncated):
        return Outcome.BAD_BODY, status, f"{service.liveness_path} is not a Prometheus exposition"
    return Outcome.OK, status, ""


def request_bytes(ip: str, service: Service) -> bytes:
    host = f"[{ip}]" if ":" in ip else ip
    return (
        f"GET {service.probe_target} HTTP/1.1\r\nHost: {host}:{service.port}\r\n"
        f"User-Agent: {USER_AGENT}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
