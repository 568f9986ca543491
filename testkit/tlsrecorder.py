"""A TLS server that plays a master and keeps every byte it is sent, after decryption.

It stands in for an impostor (or a master whose CA is not the pinned one): tests read
`received` to prove that an agent sent it no join token and no node key. It answers
GET /api/v1/ca.pem with its own CA, and anything else with a JSON 200, as a master would.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from contract.pinning import CA_PATH


@dataclass
class Recorder:
    port: int
    ca_pem: bytes
    # One entry per connection: every byte it received, decrypted (b"" when the client
    # hung up during the handshake).
    received: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def everything(self) -> bytes:
        with self.lock:
            return b"".join(self.received)


def _read_request(conn: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
        data += chunk
    return data


def _answer(request: bytes, ca_pem: bytes) -> bytes:
    path = request.split(b" ", 2)[1] if request.count(b" ") >= 2 else b""
    if path == CA_PATH.encode():
        body, kind = ca_pem, b"application/x-pem-file"
    else:
        body, kind = b'{"status": "ok", "node_key": "from-the-impostor"}', b"application/json"
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )  # fmt: skip


def _serve(listener: socket.socket, context: ssl.SSLContext, recorder: Recorder) -> None:
    while True:
        try:
            raw, _ = listener.accept()
        except OSError:
            return  # closed: the test is over
        try:
            with context.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(5)
                received = _read_request(conn)
                # Kept before the answer goes, so a client that has its answer sees it here.
                with recorder.lock:
                    recorder.received.append(received)
                if received:
                    conn.sendall(_answer(received, recorder.ca_pem))
        except (OSError, ssl.SSLError):
            with recorder.lock:
                recorder.received.append(b"")  # hung up during the handshake


@contextmanager
def recording_master(
    cert: Path, key: Path, ca: Path, host: str = "127.0.0.1"
) -> Iterator[Recorder]:
    """Serve TLS with cert/key on a free port of `host`, answering CA_PATH with `ca`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(16)
    recorder = Recorder(listener.getsockname()[1], ca.read_bytes())
    thread = threading.Thread(target=_serve, args=(listener, context, recorder), daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        listener.close()
        thread.join(5)
