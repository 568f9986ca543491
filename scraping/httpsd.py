"""Prometheus HTTP service discovery: the targets of one job, for one shard of K.

One Prometheus reads the file-SD files (scraping.targets), and that stays the
default. Past what one Prometheus can scrape, K servers each take a stable 1/K of
the fleet from this endpoint (Prometheus `http_sd_configs`):

    GET /api/v1/sd/<job>?shard=K&of=N
    Authorization: Bearer <MAC_SD_TOKEN>

The answer is what Prometheus's HTTP SD expects, a JSON list of target groups
(`[{"targets": ["10.0.0.7:29101"], "labels": {...}}]`, Content-Type
application/json), made by scraping.targets.target_groups: the same targets and
labels as the file-SD files, so the two never disagree.

A node's shard is scraping.targets.shard_of (Prometheus's own `hashmod` over the
`node` label): the split of the shard files that scale-out mode's scrapers read on the
master's host, so a Prometheus elsewhere and those scrapers agree on who scrapes what.

Errors say what is wrong: 401 without the token (or while no token is set),
404 for a job that Prometheus does not scrape, 400 naming `shard` or `of` when one
is missing, not an integer, or out of range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.views.decorators.http import require_GET

from contract.bearer import bearer_matches
from inventory.models import Node
from scraping.targets import (
    SCRAPED_SERVICES,
    TARGET_FIELDS,
    dump_groups,
    shard_of,
    target_groups,
)

CONTENT_TYPE = "application/json"


class ShardError(ValueError):
    """A bad `shard` or `of` parameter; `parameter` names it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def parse_shard(query: QueryDict | Mapping[str, str]) -> tuple[int, int]:
    """(shard, of) from the query string; (0, 1), everything, when neither is given."""
    raw = {name: query.get(name) for name in ("shard", "of")}
    if raw["shard"] is None and raw["of"] is None:
        return 0, 1
    for name in ("shard", "of"):
        if raw[name] is None:
            raise ShardError(
                name, f"`{name}` is missing: give both shard and of, e.g. ?shard=0&of=2"
            )
    values = {}
    for name, text in raw.items():
        # ASCII digits only: int() also reads "+1", "1_0" and other scripts' digits, and
        # refuses more than 4,300 of them with a ValueError.
        digits = text.strip()
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 6):
            raise ShardError(name, f"`{name}` must be a whole number, not {text!r}")
        values[name] = int(digits)
    shard, of = values["shard"], values["of"]
    if of < 1:
        raise ShardError(
            "of", f"`of` must be at least 1 (the number of Prometheus servers), not {of}"
        )
    if not 0 <= shard < of:
        raise ShardError(
            "shard", f"`shard` must be between 0 and {of - 1} when of={of}, not {shard}"
        )
    return shard, of


def render_shard(nodes: Iterable[Mapping], service: str, shard: int, of: int) -> bytes:
    """The http_sd answer: `service`'s target groups of the nodes in `shard` of `of`."""
    mine = (node for node in nodes if of == 1 or shard_of(node["id"], of) == shard)
    groups = target_groups(mine, (service,), cluster_name=settings.CLUSTER_NAME)
    return dump_groups(groups[service])


def _error(status: int, detail: str, **extra: str) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status)


@require_GET
def http_sd(request: HttpRequest, service: str) -> HttpResponse:
    if not bearer_matches(request.headers.get("Authorization", ""), settings.SD_TOKEN):
        detail = (
            "http_sd needs 'Authorization: Bearer <MAC_SD_TOKEN>'; the config written by "
            "`manage.py prometheus_config --shard K --of N` sends it."
            if settings.SD_TOKEN
            else "http_sd is closed (MAC_METRICS_TOKEN=off and no MAC_SD_TOKEN): set "
            "MAC_SD_TOKEN on the master, restart it, then write each Prometheus's config "
            "with `manage.py prometheus_config --shard K --of N`."
        )
        response = _error(401, detail)
        response["WWW-Authenticate"] = 'Bearer realm="mac-sd"'
        return response
    if service not in SCRAPED_SERVICES:
        return _error(404, f"unknown job {service!r}; jobs: {', '.join(SCRAPED_SERVICES)}")
    try:
        shard, of = parse_shard(request.GET)
    except ShardError as exc:
        return _error(400, str(exc), parameter=exc.parameter)
    nodes = Node.objects.order_by().values(*TARGET_FIELDS).iterator(chunk_size=2000)
    return HttpResponse(render_shard(nodes, service, shard, of), content_type=CONTENT_TYPE)
