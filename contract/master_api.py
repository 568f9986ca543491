"""HTTP client of the master's node API: /health, register, deregister, self and its events,
and the nodes list that `mac` reads with an API token (MAC_API_TOKEN).

Also the one builder of a registration body, for `mac start agent` and the
simulated fleets of the tests and benchmarks alike.

Plain http.client so the connection can leave from the address the agent reports (the
master then sees the same address whether or not a join token lets it trust the
claimed one). Over `https://` with a CA pin, the first connection checks the master's
CA against the pin (contract.pinning) before any request carries a credential.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from urllib.parse import urlencode, urlsplit

from contract import __version__
from contract.bearer import authorization
from contract.pinning import trusted_context
from contract.services import NODE_KEY_HEADER

# What an agent reports about itself at each registration, beyond its name and address;
# the master overwrites these on the node every time. Declared here once: the master's
# Registration, its serializer's field list, the node's detail and the admin derive
# from it, and tests/inventory/test_reported_fields.py holds each of them to it.
REPORTED_FIELDS = (
    "gpu_vendor",
    "gpu_count",
    "gpu_model",
    "agent_network",
    "nics",
    "exporters",
    "agent_version",
    "machine_id",
    "labels",
)
# The whole body of POST /api/v1/register.
REGISTRATION_FIELDS = ("hostname", "ip", *REPORTED_FIELDS)
# How an API token of a master user goes in Authorization (DRF's TokenAuthentication).
API_AUTH_SCHEME = "Token"
# Nodes per page of GET /api/v1/nodes/ (the master's default page size).
NODES_PAGE = 100


@dataclass
class Reply:
    status: int  # 0 when no HTTP answer came back
    body: dict | list | str
    headers: dict[str, str]
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def reason(self) -> str:
        """Why it failed, in one line a person can act on."""
        if self.status == 0:
            return self.error
        if isinstance(self.body, dict):
            parts = []
            for key, value in self.body.items():
                text = "; ".join(map(str, value)) if isinstance(value, list) else str(value)
                parts.append(text if key == "detail" else f"{key}: {text}")
            detail = ", ".join(parts)
        else:
            detail = str(self.body).strip().splitlines()[0][:200] if str(self.body).strip() else ""
        return f"HTTP {self.status}" + (f" ({detail})" if detail else "")


def registration_body(
    hostname: str,
    ip: str,
    exporters: Mapping[str, int],
    *,
    gpu_vendor: str = "none",
    gpu_count: int = 0,
    gpu_model: str = "",
    agent_network: str = "",
    nics: Sequence[Mapping] = (),
    labels: Mapping[str, str] | None = None,
    agent_version: str = __version__,
    machine_id: str = "",
) -> dict:
    """The JSON body of POST /api/v1/register (inventory.api.serializers reads it).

    Its keys are REGISTRATION_FIELDS, in that order.
    """
    reported = {
        "gpu_vendor": gpu_vendor,
        "gpu_count": gpu_count,
        "gpu_model": gpu_model,
        "agent_network": agent_network,
        "nics": [dict(nic) for nic in nics],
        "exporters": dict(exporters),
        "agent_version": agent_version,
        "machine_id": machine_id,
        "labels": dict(labels or {}),
    }
    return {"hostname": hostname, "ip": ip, **{name: reported[name] for name in REPORTED_FIELDS}}


def route_address(master_host: str, port: int) -> str:
    """This host's address on the route to the master (UDP connect sends no packet)."""
    family = socket.AF_INET6 if ":" in master_host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(master_host, port, family, socket.SOCK_DGRAM)
    except socket.gaierror:
        infos = socket.getaddrinfo(master_host, port, 0, socket.SOCK_DGRAM)
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_DGRAM) as sock:
        sock.connect(addr)
        return sock.getsockname()[0]


class MasterClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        join_token: str = "",
        node_key: str = "",
        api_token: str = "",
        source_ip: str | None = None,
        ca_pin: str = "",
    ) -> None:
        """`ca_pin` (hex, contract.pinning.parse_pin) needs an https:// `base_url`: with it
        the client trusts that CA alone, once its public key hashed to the pin.

        `api_token` (a master user's, for the nodes list) goes in Authorization in place
        of the join token."""
        parts = urlsplit(base_url)
        self.tls = parts.scheme == "https"
        if ca_pin and not self.tls:
            raise ValueError(f"a CA pin needs an https:// master URL, not {base_url}")
        self.url = base_url.rstrip("/")
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.timeout = timeout
        self.join_token = join_token
        self.node_key = node_key
        self.api_token = api_token
        self.source_ip = source_ip
        self.ca_pin = ca_pin
        self._context: ssl.SSLContext | None = None

    def _tls_context(self, source: tuple[str, int] | None) -> ssl.SSLContext:
        """The pinned context, checked once per client; the system's roots without a pin.

        Raises contract.pinning.UntrustedMaster on a mismatch (not an OSError, so that
        no caller mistakes it for a master that is merely down).
        """
        if self._context is None:
            if self.ca_pin:
                self._context = trusted_context(
                    self.url, self.host, self.port, self.ca_pin,
                    timeout=self.timeout, source=source,
                )  # fmt: skip
            else:
                self._context = ssl.create_default_context()
        return self._context

    def _connection(self, bind: bool) -> http.client.HTTPConnection:
        source = (self.source_ip, 0) if bind and self.source_ip else None
        if self.tls:
            return http.client.HTTPSConnection(
                self.host,
                self.port,
                timeout=self.timeout,
                source_address=source,
                context=self._tls_context(source),
            )
        return http.client.HTTPConnection(
            self.host, self.port, timeout=self.timeout, source_address=source
        )

    def request(self, method: str, path: str, payload: dict | None = None) -> Reply:
        headers = {"Accept": "application/json", "User-Agent": "mac-cli"}
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        if self.api_token:
            headers["Authorization"] = f"{API_AUTH_SCHEME} {self.api_token}"
        elif self.join_token:
            headers["Authorization"] = authorization(self.join_token)
        if self.node_key:
            headers[NODE_KEY_HEADER] = self.node_key
        for bind in (True, False):
            try:
                # First: the CA pin, checked (or refused) before a header is sent.
                conn = self._connection(bind)
            except OSError as exc:
                if bind and self.source_ip and getattr(exc, "errno", None) in (99, 49):
                    continue
                return Reply(0, "", {}, _describe(exc, self.timeout))
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read(1 << 20).decode("utf-8", "replace")
            except OSError as exc:
                # The reported address may not be bindable (NAT): retry unbound once.
                if bind and self.source_ip and getattr(exc, "errno", None) in (99, 49):
                    continue
                return Reply(0, "", {}, _describe(exc, self.timeout))
            except http.client.HTTPException as exc:
                return Reply(0, "", {}, f"bad HTTP answer: {exc!r}")
            finally:
                conn.close()
            try:
                parsed: dict | list | str = json.loads(raw) if raw else ""
            except ValueError:
                parsed = raw
            return Reply(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})
        return Reply(0, "", {}, "no route")

    def health(self) -> Reply:
        return self.request("GET", "/health")

    def register(self, payload: dict) -> Reply:
        return self.request("POST", "/api/v1/register", payload)

    def deregister(self, hostname: str) -> Reply:
        return self.request("POST", "/api/v1/deregister", {"hostname": hostname})

    def self_info(self) -> Reply:
        return self.request("GET", "/api/v1/self")

    def report_event(self, payload: dict) -> Reply:
        """Add an event to the calling node's history (sys-manager's ip_forward resets)."""
        return self.request("POST", "/api/v1/nodes/self/events", payload)

    def node_at(self, ip: str) -> tuple[dict | None, Reply]:
        """(the inventory's node at address `ip`, the last reply), from GET /api/v1/nodes/.

        `?ip=` lists the node at exactly that address. A master older than that filter
        ignores it and lists the whole fleet, so pages are still read until a node's
        address is exactly `ip`. None when no node has it, or when a reply is not ok (the
        reply says why; a 400 names an `ip` the master cannot read); needs an API token.
        """
        offset = 0
        while True:
            query = urlencode({"ip": ip, "limit": NODES_PAGE, "offset": offset})
            reply = self.request("GET", f"/api/v1/nodes/?{query}")
            if not reply.ok:
                return None, reply
            body = reply.body if isinstance(reply.body, dict) else {}
            page = body.get("results")
            if not isinstance(page, list):
                return None, Reply(
                    0, "", reply.headers, "its answer to GET /api/v1/nodes/ is not a nodes list"
                )
            for node in page:
                if isinstance(node, dict) and _same_address(node.get("ip"), ip):
                    return node, reply
            if not (page and body.get("next")):
                return None, reply
            offset += len(page)


def _same_address(found: object, wanted: str) -> bool:
    try:
        return ip_address(str(found)) == ip_address(wanted)
    except ValueError:
        return found == wanted


def _describe(exc: OSError, timeout: float) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"the master's TLS certificate does not verify ({exc.verify_message}); with "
            "the master's CA pinned (MAC_MASTER_CA_SHA256) a name or address missing from "
            "its certificate goes into MAC_TLS_NAMES on the master, then restart it"
        )
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    return exc.strerror or str(exc)
