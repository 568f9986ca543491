"""What a reader tries against the metrics through the front door (issue 31): one table.

`STORE_WRITES` lists every write and maintenance endpoint of the two servers that can
stand behind /prometheus/ (Prometheus, or VictoriaMetrics behind the targets view in
scale-out mode); `spellings` spells each path as an attacker would, so that a gate that
decides on a path spelled otherwise than the server reads it is caught. The gate's unit
tests (tests/macweb/test_monitoring_gate.py) and the end-to-end tests through real
nginx in both modes (tests/maccli/test_scaleout.py, tests/maccli/test_front_door.py)
iterate the same table. `DATASOURCE_READS` is what Grafana's Prometheus data source
asks, which a reader must get.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

# A series that any write below would create: none may exist afterwards.
PROBE = "mac_gate_probe"


@dataclass(frozen=True)
class Attempt:
    name: str
    target: str  # path and query behind /prometheus/
    body: bytes = b""
    content_type: str = "application/x-www-form-urlencoded"


def _import_json() -> bytes:
    now = int(time.time() * 1000)
    return f'{{"metric":{{"__name__":"{PROBE}"}},"values":[1],"timestamps":[{now}]}}\n'.encode()


def _datadog_json(version: int) -> bytes:
    now = int(time.time())
    point = [now, 1] if version == 1 else {"timestamp": now, "value": 1}
    return json.dumps({"series": [{"metric": PROBE, "points": [point]}]}).encode()


_LINE = f"{PROBE} 1\n".encode()
_INFLUX = f"{PROBE} value=1\n".encode()
_ALL = urllib.parse.quote('{__name__=~".+"}')
STORE_WRITES: tuple[Attempt, ...] = (
    Attempt("delete_series", f"/api/v1/admin/tsdb/delete_series?match[]={_ALL}"),
    Attempt("delete_series (Graphite tags)", f"/tags/delSeries?path={PROBE}"),
    Attempt("Prometheus snapshot", "/api/v1/admin/tsdb/snapshot"),
    Attempt("clean_tombstones", "/api/v1/admin/tsdb/clean_tombstones"),
    Attempt("snapshot/create", "/snapshot/create"),
    Attempt("snapshot/delete_all", "/snapshot/delete_all"),
    Attempt("snapshot/delete", "/snapshot/delete?snapshot=all"),
    Attempt("snapshot/list", "/snapshot/list"),
    Attempt("force_merge", "/internal/force_merge"),
    Attempt("force_flush", "/internal/force_flush"),
    Attempt("resetRollupResultCache", "/internal/resetRollupResultCache"),
    Attempt("import", "/api/v1/import", _import_json(), "application/json"),
    Attempt("import/csv", f"/api/v1/import/csv?format=2:metric:{PROBE}", b"1\n", "text/csv"),
    Attempt("import/native", "/api/v1/import/native", b"\x00", "application/octet-stream"),
    Attempt("import/prometheus", "/api/v1/import/prometheus", _LINE, "text/plain"),
    Attempt("remote write", "/api/v1/write", b"\x00", "application/x-protobuf"),
    Attempt("Influx write", "/write", _INFLUX, "text/plain"),
    Attempt("Influx write (prefixed)", "/influx/write", _INFLUX, "text/plain"),
    Attempt("Influx v2 write", "/api/v2/write", _INFLUX, "text/plain"),
    Attempt("Graphite tag registration", f"/tags/tagSeries?path={PROBE}"),
    # Ingestion that newer VictoriaMetrics (Debian 13's 1.112) adds to the store's port.
    Attempt("import (push-gateway path)", "/api/v1/import/prometheus/metrics/job/mac", _LINE,
            "text/plain"),
    Attempt("OpenTelemetry", "/opentelemetry/v1/metrics", b"\x00", "application/x-protobuf"),
    Attempt("Datadog v1 series", "/datadog/api/v1/series", _datadog_json(1), "application/json"),
    Attempt("Datadog v2 series", "/datadog/api/v2/series", _datadog_json(2), "application/json"),
    Attempt("Datadog sketches", "/datadog/api/beta/sketches", b"\x00",
            "application/x-protobuf"),
    Attempt("New Relic", "/newrelic/infra/v2/metrics/events/bulk", b"[]", "application/json"),
    Attempt("reload", "/-/reload"),
    Attempt("quit", "/-/quit"),
)  # fmt: skip


def _escaped(path: str) -> str:
    """Every character of every segment percent-escaped (`/-/quit` is `/%2D/%71%75%69%74`)."""
    return "/".join("".join(f"%{ord(c):02X}" for c in part) for part in path.split("/"))


def spellings(target: str) -> dict[str, str]:
    """{how: the URI a client sends} for `target` behind /prometheus/. Each one, once
    nginx has decoded it, stays under /prometheus/ and so meets the gate."""
    path, mark, query = target.partition("?")
    tail = mark + query
    head, _, last = path.rpartition("/")
    # The last slash escaped (a path of one part: an escaped slash before it).
    head = head or "/"
    return {
        "plain": f"/prometheus{path}{tail}",
        "the store's own /prometheus prefix": f"/prometheus/prometheus{path}{tail}",
        "%2F": f"/prometheus{head}%2F{last}{tail}",
        "%252F (escaped twice)": f"/prometheus{head}%252F{last}{tail}",
        "//": "/prometheus/" + path.replace("/", "//") + tail,
        "..": f"/prometheus/api/v1/../..{path}{tail}",
        "%2E%2E": f"/prometheus/api/%2E%2E{path}{tail}",
        "escaped letters (%2D)": f"/prometheus{_escaped(path)}{tail}",
        "trailing /": f"/prometheus{path}/{tail}",
        "upper case": f"/prometheus{path.upper()}{tail}",
    }


def spelled_writes() -> list[tuple[str, Attempt, str]]:
    """(test id, attempt, URI) for every attempt in every spelling."""
    return [
        (f"{attempt.name} [{how}]", attempt, uri)
        for attempt in STORE_WRITES
        for how, uri in spellings(attempt.target).items()
    ]


def gate_uri(uri: str) -> str:
    """The path nginx hands the gate for a client's `uri`: its query cut, escapes decoded
    once (nginx's $uri; the gate merges `//` and resolves `..` itself, as nginx does)."""
    return urllib.parse.unquote(uri.partition("?")[0])


@dataclass(frozen=True)
class Read:
    name: str
    method: str
    target: str
    body: bytes = b""


def datasource_reads(now: float | None = None) -> tuple[Read, ...]:
    """What Grafana's Prometheus data source asks (its health check, the query editor's
    completions, panels' range queries by POST)."""
    end = int(now or time.time())
    form = urllib.parse.urlencode
    return (
        Read("health check", "GET", "/api/v1/query?query=1%2B1"),
        Read("instant query", "POST", "/api/v1/query", form({"query": "up"}).encode()),
        Read(
            "range query",
            "POST",
            "/api/v1/query_range",
            form({"query": "up", "start": end - 300, "end": end, "step": 15}).encode(),
        ),
        Read("labels", "GET", "/api/v1/labels"),
        Read("labels by POST", "POST", "/api/v1/labels", form({"match[]": "up"}).encode()),
        Read("label values", "GET", "/api/v1/label/__name__/values"),
        Read("series", "GET", "/api/v1/series?match[]=up"),
        Read("series by POST", "POST", "/api/v1/series", form({"match[]": "up"}).encode()),
        Read("metadata", "GET", "/api/v1/metadata"),
        Read("build info", "GET", "/api/v1/status/buildinfo"),
    )


def send(door: str, token: str, method: str, uri: str, body: bytes = b"", content_type: str = ""):
    """`method uri` at the front door `door` with a reader's API token: (status, body).
    urllib sends the URI as it is: no `..` resolved, no escape decoded."""
    request = urllib.request.Request(
        door + uri, data=body if method == "POST" else None, method=method
    )
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", content_type or "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()
