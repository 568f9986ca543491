"""nginx's configuration, written for the master's one front door in front of the API
server: HTTP on 28080 and HTTPS on 28443 (docs/tls.md).

Why a proxy: slow clients, oversized headers and connection floods are what a reverse
proxy is built for, and nginx bounds them with its own settings instead of MAC
subclassing the app server's protocol (issue 19). It also turns the client address
into one trusted X-Forwarded-For entry, and passes the dashboard's WebSocket through.

It is also the only way in to Prometheus and Alertmanager from other hosts (issue 22):
`/prometheus/` and `/alertmanager/` pass to the servers on the master's loopback (or
its Compose network) once Django says yes to each request (nginx `auth_request` to
macweb.monitoring_gate), so the same logins, API tokens and permissions apply.

People's passwords never cross plain HTTP from another host (issue 31): with HTTPS
served, the pages people log in to (the dashboard, the login, the admin) answer plain
HTTP from any address but the master's own loopback with a redirect to HTTPS; the
machine endpoints the guide names stay on HTTP (MACHINE_PATHS: /health, /metrics, the
API, and with it registration of agents without a pin, the live socket, /prometheus/
and /alertmanager/ for API tokens). The scheme a client used is nginx's own, or what a
trusted proxy (MAC_TRUSTED_PROXIES) that ended TLS itself says in X-Forwarded-Proto;
Django learns it from X-Forwarded-Proto, which nginx always replaces.

`manage.py proxy_config` writes the configuration from the master's settings; the
process runtime runs nginx in the foreground on it (`mac start master`, service
`proxy`), the Compose master as mac-proxy. Every limit, its setting and what a
client sees past it is in docs/security.md.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.pinning import CA_PATH
from contract.settings import HttpMode

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Idle connections to the API server kept for reuse, and for how long: below the
# server's own keep-alive (macweb/gunicorn_conf.py), so that nginx never sends a request
# on a connection the server is closing.
UPSTREAM_KEEPALIVE = 32
UPSTREAM_KEEPALIVE_SECONDS = 60
# A request the API server has not answered in this long gets 504; gunicorn restarts
# a worker silent for 30 s, so this is only reached when the server is stuck.
UPSTREAM_READ_SECONDS = 60
# The live socket stays open while the page is; the page reconnects if it drops.
WEBSOCKET_IDLE_SECONDS = 3600
RETRY_AFTER_SECONDS = 5
# Every method the master serves somewhere (the API, the pages, the admin).
ALLOWED_METHODS = "GET, HEAD, POST, OPTIONS"
# Where nginx asks Django whether a request to Prometheus or Alertmanager may pass
# (macweb.monitoring_gate); only nginx's own subrequests reach it.
GATE_PATH = "/auth/monitoring"
# The servers behind the front door, by the path prefix they are served under.
MONITORING_SERVERS = ("prometheus", "alertmanager")
# The pages people open at /prometheus/ (the navigation bar, `mac start master`, the
# guide) and where Debian's Prometheus has them: its classic UI. Its configuration
# page is left out: the gate does not serve it (macweb.monitoring_gate).
PROMETHEUS_PAGES = {
    "": "classic/graph",
    "graph": "classic/graph",
    "targets": "classic/targets",
    "alerts": "classic/alerts",
    "rules": "classic/rules",
    "status": "classic/status",
    "flags": "classic/flags",
    "tsdb-status": "classic/tsdb-status",
    "service-discovery": "classic/service-discovery",
}
# Where people opening /alertmanager/ go: the dashboard's alerts and silences.
ALERTS_PAGE = "/alerts/"
ALERTMANAGER_ROOT_TEXT = (
    "Alertmanager's API is under /alertmanager/api/v2/ (amtool, Grafana); "
    f"its alerts and silences for people are on the dashboard at {ALERTS_PAGE}\n"
)
# MAC_HTTP (contract.settings.HttpMode): plain HTTP served as before (but the people's
# pages, below), refused to other hosts (loopback only, for the master's own commands and
# health checks), or redirected to HTTPS (but /health).
# What machines use over plain HTTP from other hosts in the default mode (MAC_HTTP=on):
# exact paths, and prefixes (the API includes POST /api/v1/register for agents without
# a pin). Every other path is a page people may type a password into: sent to HTTPS.
MACHINE_PATHS = ("/health", "/metrics")
MACHINE_PREFIXES = ("/api/", "/ws/", "/static/", "/prometheus/", "/alertmanager/")


@dataclass(frozen=True)
class TlsServing:
    """HTTPS beside HTTP in the same server (macweb.tls made or checked the files)."""

    listen: str  # HOST:PORT
    cert: str  # the chain, server certificate first
    key: str
    ca_pem: str  # served to agents at contract.pinning.CA_PATH, to check against their pin


@dataclass(frozen=True)
class ProxyLimits:
    """What nginx enforces (settings.API_* and DATA_UPLOAD_MAX_MEMORY_SIZE)."""

    request_timeout: float
    keepalive: int
    max_connections: int
    max_connections_per_address: int
    max_header_bytes: int
    max_body_bytes: int
    # Registrations (and, counted apart, deregistrations) per client address: MAC_REGISTER_RATE.
    register_rate: str = "600/min"

    @classmethod
    def from_settings(cls, settings) -> ProxyLimits:
        return cls(
            request_timeout=settings.API_REQUEST_TIMEOUT,
            keepalive=settings.API_KEEPALIVE,
            max_connections=settings.API_MAX_CONNECTIONS,
            max_connections_per_address=settings.API_MAX_CONNECTIONS_PER_ADDRESS,
            max_header_bytes=settings.API_MAX_HEADER_BYTES,
            max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            register_rate=settings.REGISTER_RATE,
        )


_PERIOD_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class RequestRate:
    """MAC_REGISTER_RATE as nginx's limit_req takes it: a steady rate and a burst.

    A flood limit per client address, where an inexact answer is safe (as healthchecks'
    token bucket): `count` requests pass at once, then one every period/count. nginx
    knows requests per second or per minute only, so an hourly or daily rate becomes the
    nearest per-minute one (at least 1r/m); the burst stays `count`.
    """

    count: int
    seconds: int

    @classmethod
    def parse(cls, rate: str) -> RequestRate:
        """DRF's spelling, "<count>/<s|sec|m|min|h|hour|d|day>" (inventory.checks)."""
        count, _, period = rate.partition("/")
        return cls(int(count), _PERIOD_SECONDS[period.strip()[0]])

    @property
    def nginx_rate(self) -> str:
        if self.seconds == 1:
            return f"{self.count}r/s"
        return f"{max(1, round(self.count * 60 / self.seconds))}r/m"

    @property
    def burst(self) -> int:
        # nginx lets burst + 1 requests through at once.
        return self.count - 1

    @property
    def retry_after(self) -> int:
        """Seconds until the next request would pass (one leaks out of the bucket)."""
        return max(1, -(-self.seconds // self.count))


def _listen(address: str) -> str:
    """nginx's spelling of HOST:PORT ([::]:28080 for IPv6)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _text(value: str) -> str:
    """A double-quoted nginx string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _to_api(set_target: str, target: str) -> str:
    """A location's lines that pass the request to the API server."""
    return f"""\
{set_target}            proxy_pass {target};
            # (proxy_set_header in a location replaces every inherited one: all here.)
            proxy_set_header Host $http_host;
            # Replaces whatever the client sent: the one address nginx resolved.
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $mac_scheme;
            proxy_set_header Connection "";
            proxy_read_timeout {UPSTREAM_READ_SECONDS}s;
            proxy_send_timeout {UPSTREAM_READ_SECONDS}s;
"""


def _rate_limited(name: str, rate: RequestRate, set_target: str, target: str) -> str:
    """The location of one agent endpoint, behind its limit_req zone of the same name."""
    return f"""\
        location = /api/v1/{name} {{
            limit_req zone={name}{f" burst={rate.burst} nodelay" if rate.burst else ""};
            # (error_page in a location replaces every inherited one: all here.)
            error_page 429 @rate_limited;
            error_page 405 @method_not_allowed;
            error_page 494 =431 @headers_too_large;
            error_page 413 @body_too_large;
            error_page 502 504 =503 @api_down;
{_to_api(set_target, target)}        }}"""


def render_nginx_conf(
    limits: ProxyLimits,
    *,
    listen: str,
    upstream: str,
    prefix: str,
    trusted_proxies: Sequence[IPNetwork] = (),
    resolver: str = "",
    tls: TlsServing | None = None,
    http_mode: HttpMode = HttpMode.ON,
    monitoring: Mapping[str, str] | None = None,
    classic_ui: bool = True,
    https_port: int | None = None,
) -> str:
    """nginx.conf for a proxy on `listen` (HOST:PORT) in front of the API at `upstream`.

    `prefix` is nginx's own folder (pid file, temporary folders): under the master's
    data directory for the process runtime, inside the container under Docker.
    `resolver` (Docker's 127.0.0.11) makes nginx look the upstream's name up again as
    it goes, so that a recreated mac-api-server with a new address is still found;
    without it the upstream is a fixed address with kept-alive connections.
    `tls` adds HTTPS in the same server; `http_mode` (HttpMode) is what HTTP does then,
    and redirects to HTTPS name `https_port` (where other hosts reach it; default: the
    port HTTPS listens on).
    `monitoring` maps "prometheus" and "alertmanager" to HOST:PORT; each one given is
    served under /<name>/ behind the gate. `classic_ui`: /prometheus/ is Debian's
    Prometheus, whose pages are under /classic/ (scale-out mode's targets view serves
    its own at the usual paths).
    """
    timeout_ms = max(1, round(limits.request_timeout * 1000))
    # nginx has no separate cap on client connections: worker_connections counts each
    # request's connection to the API server too, hence twice the client cap, plus room
    # for connections still closing and the kept-alive ones. With 128 spare, 1,000
    # agents at once (bench/register.py, 2 busy CPUs) made nginx warn "worker_connections
    # are not enough" and reset 3-6 of 7,000 requests in 2 of 5 runs; with 1,024, 0 in 2.
    worker_connections = 2 * limits.max_connections + 1024
    # A request body larger than the API accepts still reaches it (up to twice the
    # size), so that the API's own 400 names the limit; beyond, nginx answers 413.
    body_cap = 2 * limits.max_body_bytes
    header_text = (
        f"Request headers exceed {limits.max_header_bytes} bytes (MAC_API_MAX_HEADER_BYTES).\n"
    )
    body_text = f"Request body exceeds {body_cap} bytes (MAC_MAX_BODY_BYTES).\n"
    busy_text = (
        f"More than {limits.max_connections_per_address} requests at once from one address "
        "(MAC_API_MAX_CONNECTIONS_PER_ADDRESS); retry later.\n"
    )
    down_json = '{"detail": "the API server does not answer; on the master: mac status master"}\n'
    rate = RequestRate.parse(limits.register_rate)
    rate_json = json.dumps(
        {
            "detail": f"Too many requests from this address: the limit is "
            f"{limits.register_rate} (MAC_REGISTER_RATE), at most "
            f"{limits.max_connections_per_address} at once "
            f"(MAC_API_MAX_CONNECTIONS_PER_ADDRESS); retry in {rate.retry_after} s."
        }
    )
    rate_json += "\n"
    if resolver:
        upstream_block = f"    resolver {resolver} valid=10s ipv6=off;\n"
        target = "$mac_api"
        set_target = f"            set $mac_api http://{upstream};\n"
    else:
        upstream_block = (
            f"    upstream mac_api {{\n        server {upstream};\n"
            f"        keepalive {UPSTREAM_KEEPALIVE};\n"
            f"        keepalive_timeout {UPSTREAM_KEEPALIVE_SECONDS}s;\n    }}\n"
        )
        target = "http://mac_api"
        set_target = ""
    backlog = max(511, limits.max_connections)
    http_listen, tls_lines, https_map = _front_door(
        listen, backlog, tls, http_mode, https_port=https_port
    )
    scheme_map = _client_scheme(trusted_proxies)
    monitoring_locations = _monitoring_locations(
        monitoring or {}, resolver, target, set_target, classic_ui
    )
    to_api = _to_api(set_target, target)
    realip = "".join(f"    set_real_ip_from {net};\n" for net in trusted_proxies)
    if realip:
        realip += "    real_ip_header X-Forwarded-For;\n    real_ip_recursive on;\n"
    return f"""\
# Written by `manage.py proxy_config` (macweb/nginxconf.py) at every start. Do not edit:
# change the MAC_API_* settings and restart the master (docs/security.md).
daemon off;
worker_processes 1;
worker_rlimit_nofile {2 * worker_connections + 64};
pid {prefix}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections {worker_connections};
}}

http {{
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    default_type text/plain;
    server_tokens off;

    # The API server logs every request it serves; this log has only what nginx
    # answered itself (timeouts, refusals, the API server down).
    map $upstream_addr $answered_by_proxy {{
        "" 1;
        default 0;
    }}
    # A password-reset link's token never reaches the log (macweb/accesslog.py).
    map $request $mac_logged_request {{
        "~^(?<mac_head>\\S+ /accounts/reset/[^/?# ]+/)(?!set-password/)[^/?# ]+(?<mac_tail>.*)$"
            "${{mac_head}}<hidden>${{mac_tail}}";
        default $request;
    }}
    log_format mac '$remote_addr [$time_local] "$mac_logged_request" $status '
                   '$body_bytes_sent $request_time';
    access_log /dev/stdout mac if=$answered_by_proxy;

    # Slow clients (MAC_API_REQUEST_TIMEOUT): the whole header within it, and no pause
    # longer than it while sending the body or reading the answer.
    client_header_timeout {timeout_ms}ms;
    client_body_timeout {timeout_ms}ms;
    send_timeout {timeout_ms}ms;
    keepalive_timeout {limits.keepalive}s;
    # Headers (MAC_API_MAX_HEADER_BYTES): at most one large buffer after the first 1 KiB.
    client_header_buffer_size 1k;
    large_client_header_buffers 1 {limits.max_header_bytes};
    # Bodies stay in memory, never in temporary files.
    client_max_body_size {body_cap};
    client_body_buffer_size {body_cap};
    proxy_max_temp_file_size 0;
    # The client a per-address limit counts: an IPv4 address itself, an IPv6 client by
    # its /64 (the first 8 of its 16 bytes), which it could otherwise walk through with a
    # new address per request (inventory.addresses.counted_address; IPv4-mapped
    # addresses, ::ffff:a.b.c.d, stay whole).
    map $binary_remote_addr $mac_client {{
        "~(?s)^(?!\\x00{{10}}\\xff\\xff)(?<mac_v6_64>.{{8}}).{{8}}$" $mac_v6_64;
        default $binary_remote_addr;
    }}
    # Requests in progress per client address (MAC_API_MAX_CONNECTIONS_PER_ADDRESS).
    limit_conn_zone $mac_client zone=per_address:10m;
    limit_conn per_address {limits.max_connections_per_address};
    limit_conn_status 429;
    limit_conn_log_level warn;
    # Registrations and deregistrations per client address (MAC_REGISTER_RATE), each
    # counted apart: `mac stop agent` across a rack is not a flood of joins. Per node
    # key the API counts too (inventory.api.throttles): only it knows the keys.
    limit_req_zone $mac_client zone=register:10m rate={rate.nginx_rate};
    limit_req_zone $mac_client zone=deregister:10m rate={rate.nginx_rate};
    limit_req_status 429;
    limit_req_log_level warn;
    # The client address (MAC_TRUSTED_PROXIES): X-Forwarded-For is believed only from
    # these proxies, right to left.
{realip}
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        "" "";
    }}

{scheme_map}
{upstream_block}{https_map}
    server {{
        # A burst of agents connects at once: queue them in the kernel, not drop them.
        listen {http_listen} backlog={backlog};
{tls_lines}
        proxy_http_version 1.1;
        proxy_connect_timeout 5s;

        # nginx itself refuses TRACE (the only 405 it makes: everything else is proxied,
        # and the API server's own 405s carry its Allow header).
        error_page 405 @method_not_allowed;
        error_page 494 =431 @headers_too_large;
        error_page 413 @body_too_large;
        error_page 429 @too_many_requests;
        error_page 502 504 =503 @api_down;

        location / {{
{to_api}        }}
        # A reset link's token is in its request line, which nginx's error lines repeat
        # (the API server down, a limit hit): none of this location's are written.
        location /accounts/reset/ {{
            error_log /dev/null emerg;
{to_api}        }}

{_rate_limited("register", rate, set_target, target)}
{_rate_limited("deregister", rate, set_target, target)}
        location @rate_limited {{
            default_type application/json;
            add_header Retry-After {rate.retry_after} always;
            return 429 {_text(rate_json)};
        }}

        location /ws/ {{
{set_target}            proxy_pass {target};
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $mac_scheme;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout {WEBSOCKET_IDLE_SECONDS}s;
            proxy_send_timeout {WEBSOCKET_IDLE_SECONDS}s;
        }}

{monitoring_locations}
        location @method_not_allowed {{
            add_header Allow "{ALLOWED_METHODS}" always;
            return 405 "The $request_method method is not allowed.\n";
        }}
        location @headers_too_large {{
            return 431 {_text(header_text)};
        }}
        location @body_too_large {{
            return 413 {_text(body_text)};
        }}
        location @too_many_requests {{
            add_header Retry-After {RETRY_AFTER_SECONDS} always;
            return 429 {_text(busy_text)};
        }}
        location @api_down {{
            default_type application/json;
            add_header Retry-After {RETRY_AFTER_SECONDS} always;
            return 503 {_text(down_json)};
        }}
    }}
}}
"""


def _client_scheme(trusted_proxies: Sequence[IPNetwork]) -> str:
    """$mac_scheme, the scheme the client used, and $mac_loopback, whether it is the
    master itself: the http block's lines."""
    trusted = "".join(f"        {net} 1;\n" for net in trusted_proxies)
    return f"""\
    # The scheme the client used: nginx's own, or what a trusted proxy that ended TLS
    # itself says (MAC_TRUSTED_PROXIES); Django reads it from X-Forwarded-Proto.
    geo $realip_remote_addr $mac_via_proxy {{
        default 0;
{trusted}    }}
    map "$mac_via_proxy:$http_x_forwarded_proto" $mac_scheme {{
        default $scheme;
        "1:https" https;
        "1:http" http;
    }}
    # The master's own loopback: its commands, and a laptop's http://localhost:28080/.
    geo $mac_loopback {{
        default 0;
        127.0.0.0/8 1;
        ::1 1;
    }}
"""


def _front_door(
    listen: str,
    backlog: int,
    tls: TlsServing | None,
    http_mode: HttpMode,
    https_port: int | None,
) -> tuple[str, str, str]:
    """(HTTP's listen address, the server's TLS lines, the http block's redirect map)."""
    http_mode = HttpMode(http_mode)  # ValueError for a word that is not a mode
    if tls is None:
        if http_mode != HttpMode.ON:
            raise ValueError(f"MAC_HTTP={http_mode} needs HTTPS, which this proxy does not serve")
        return _listen(listen), "", ""
    http_listen = _listen(listen)
    if http_mode == HttpMode.OFF:
        http_listen = _listen(f"127.0.0.1:{listen.rpartition(':')[2]}")
    tls_port = https_port or int(tls.listen.rpartition(":")[2])
    lines = (
        f"        listen {_listen(tls.listen)} ssl backlog={backlog};\n"
        f"        ssl_certificate {_text(tls.cert)};\n"
        f"        ssl_certificate_key {_text(tls.key)};\n"
        "        ssl_protocols TLSv1.2 TLSv1.3;\n"
        # Agents and Prometheus come back every few seconds: resume, not a new handshake.
        "        ssl_session_cache shared:mac_tls:10m;\n"
        "        ssl_session_timeout 1h;\n"
        "        # The CA agents check against their pin (MAC_MASTER_CA_SHA256): public.\n"
        f"        location = {CA_PATH} {{\n"
        "            default_type application/x-pem-file;\n"
        f"            return 200 {_text(tls.ca_pem)};\n"
        "        }\n"
    )
    if http_mode == HttpMode.OFF:
        return http_listen, lines, ""
    if http_mode == HttpMode.REDIRECT:
        # /health stays on HTTP: the guide's checks and the master's own.
        rules = '        "~^http:[01]:/health$" 0;\n        "~^http:" 1;\n'
    else:
        # People's pages from another host go to HTTPS; machines keep plain HTTP.
        kept = "|".join(re.escape(path[1:]) for path in MACHINE_PATHS)
        prefixes = "|".join(re.escape(prefix[1:-1]) for prefix in MACHINE_PREFIXES)
        rules = (
            f'        "~^http:0:/({kept})$" 0;\n'
            f'        "~^http:0:/({prefixes})/" 0;\n'
            '        "~^http:0:" 1;\n'
        )
    https_map = (
        '    map "$mac_scheme:$mac_loopback:$uri" $mac_to_https {\n'
        f"        default 0;\n{rules}    }}\n"
    )
    lines += (
        f"        if ($mac_to_https) {{\n"
        f"            return 301 https://$host:{tls_port}$request_uri;\n        }}\n"
    )
    return http_listen, lines, https_map


def _people_pages(servers: Mapping[str, str], classic_ui: bool) -> str:
    """Where the pages people open go: Prometheus's to its classic UI (the only one
    Debian ships; its /graph would answer 301 to /graph/, outside the prefix), and
    /alertmanager/ in a browser to the dashboard's alerts and silences (Debian's
    Alertmanager has no web UI). Relative redirects: right on any host, port and scheme."""
    blocks = []
    if "prometheus" in servers and classic_ui:
        for page, classic in PROMETHEUS_PAGES.items():
            blocks.append(
                f"        location = /prometheus/{page} {{\n"
                "            absolute_redirect off;\n"
                f"            return 302 /prometheus/{classic}$is_args$args;\n        }}\n"
            )
    if "alertmanager" in servers:
        blocks.append(
            f"""\
        location = /alertmanager/ {{
            absolute_redirect off;
            if ($http_accept ~* "text/html") {{
                return 302 {ALERTS_PAGE};
            }}
            return 404 {_text(ALERTMANAGER_ROOT_TEXT)};
        }}
"""
        )
    return "".join(blocks)


def _monitoring_locations(
    servers: Mapping[str, str],
    resolver: str,
    api_target: str,
    set_api: str,
    classic_ui: bool = True,
) -> str:
    """/prometheus/ and /alertmanager/ behind Django's gate, and the gate's subrequest.

    The gate sees the path as nginx normalised it ($uri: %-escapes decoded, `..` and
    `//` resolved), captured before the prefix is cut, and the client's method: the
    subrequest itself is always a GET. Its answer's X-Mac-Gate header says why a
    request is refused; nginx shows that (the subrequest's body is never sent on).
    The server gets that same normalised path (nginx escapes it again), so what the
    gate decided on is what the server reads.
    """
    if not servers:
        return ""
    unknown = set(servers) - set(MONITORING_SERVERS)
    if unknown:
        raise ValueError(f"no such monitoring server: {', '.join(sorted(unknown))}")
    blocks = [
        f"""\
        # Django answers whether a request may pass (macweb.monitoring_gate).
        location = {GATE_PATH} {{
            return 404;
        }}
        location = /_mac_gate {{
            internal;
{set_api}            proxy_pass {api_target}{GATE_PATH};
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $mac_scheme;
            proxy_set_header X-Original-URI $mac_gate_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header Connection "";
        }}
        location @gate_login {{
            # People (a browser asks for HTML) go to the login page and come back.
            if ($http_accept ~* "text/html") {{
                return 302 /accounts/login/?next=$request_uri;
            }}
            add_header WWW-Authenticate 'Bearer realm="mac"' always;
            return 401 "Log in (/accounts/login/) or send 'Authorization: Bearer <API token>'.\\n";
        }}
        location @gate_refused {{
            return 403 "$mac_gate_reason\\n";
        }}
""",
        _people_pages(servers, classic_ui),
    ]
    for name in MONITORING_SERVERS:
        if name not in servers:
            continue
        address = servers[name]
        if resolver:
            upstream = f"            set $mac_{name} http://{address};\n"
            target = f"$mac_{name}"
        else:
            upstream = ""
            target = f"http://{address}"
        down = _text(f"{name.capitalize()} does not answer; on the master: mac status master\n")
        blocks.append(
            f"""\
        location /{name}/ {{
            # A control character in the decoded path (%0D%0A) would end the gate's
            # X-Original-URI header early and escape the prefix's rewrite below: the
            # server would read another path than the gate decided on.
            if ($uri ~ "[\\x00-\\x1f\\x7f]") {{
                return 400 "A control character in the path is refused.\\n";
            }}
            set $mac_gate_uri $uri;
{upstream}            # The servers run with their route prefix at / (loopback use keeps working)
            # and their external URL at /{name}/ (the links they make). Last of the
            # rewrite directives: `break` ends them (a `set` after it would never run).
            rewrite ^/{name}(/.*)$ $1 break;
            auth_request /_mac_gate;
            auth_request_set $mac_gate_reason $upstream_http_x_mac_gate;
            proxy_pass {target};
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto $mac_scheme;
            # The servers need neither: the gate has read them.
            proxy_set_header Authorization "";
            proxy_set_header Cookie "";
            proxy_set_header Connection "";
            proxy_read_timeout {UPSTREAM_READ_SECONDS}s;
            # The servers' redirects stay under the prefix, on the client's host: a
            # path without it gets it, their external URL's host is dropped.
            proxy_redirect ~^/(?!{name}/)(.*)$ /{name}/$1;
            proxy_redirect ~^https?://[^/]+/{name}/(.*)$ /{name}/$1;
            absolute_redirect off;
            error_page 401 = @gate_login;
            error_page 403 = @gate_refused;
            error_page 405 @method_not_allowed;
            error_page 413 @body_too_large;
            error_page 429 @too_many_requests;
            error_page 502 504 =503 @{name}_down;
        }}
        location @{name}_down {{
            add_header Retry-After {RETRY_AFTER_SECONDS} always;
            return 503 {down};
        }}
"""
        )
    return "".join(blocks)
