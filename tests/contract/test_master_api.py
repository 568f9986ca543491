"""MasterClient reading the inventory with an API token: the header it sends, and the one
node whose address is exactly the one asked for, over a real HTTP server on loopback."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from contract.master_api import MasterClient
from testkit.fakehttp import JsonHandler, serving

ASKED = "10.0.0.1"
# What a master older than ?ip= lists (it ignores the filter), in hostname order: the
# exact address on the second page, after addresses it is part of.
PAGES = [
    [{"hostname": "gpu-a", "ip": "10.0.0.17", "agent_network": "bridge"}],
    [
        {"hostname": "gpu-b", "ip": "10.0.0.100", "agent_network": "bridge"},
        {"hostname": "gpu-c", "ip": "10.0.0.1", "agent_network": "host"},
    ],
]


class NodesList(JsonHandler):
    """GET /api/v1/nodes/ paged one page per offset step; records what it was sent."""

    seen: list[tuple[str | None, dict]] = []

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        self.seen.append((self.headers.get("Authorization"), query))
        if self.headers.get("Authorization") != "Token good":
            self.send_json(401, {"detail": "Invalid token."})
            return
        index = 0 if query.get("offset", "0") == "0" else 1
        page = PAGES[index]
        following = "http://master/api/v1/nodes/?offset=1" if index == 0 else None
        self.send_json(200, {"count": 3, "next": following, "previous": None, "results": page})


class FilteringNodesList(JsonHandler):
    """GET /api/v1/nodes/ of a master that takes ?ip=: the node at exactly that address."""

    seen: list[dict] = []

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        self.seen.append(query)
        found = [node for page in PAGES for node in page if node["ip"] in query.get("ip", [])]
        self.send_json(200, {"count": len(found), "next": None, "previous": None, "results": found})


def test_it_asks_the_master_for_the_exact_address_once():
    FilteringNodesList.seen = []
    with serving(FilteringNodesList) as url:
        node, reply = MasterClient(url, api_token="good").node_at(ASKED)
    assert reply.ok and node == PAGES[1][1]
    # ?ip=, not ?search= (which also finds 10.0.0.17 and 10.0.0.100): one page, one request.
    assert [(query["ip"], "search" in query) for query in FilteringNodesList.seen] == [
        ([ASKED], False)
    ]


def test_it_sends_the_api_token_and_finds_the_exact_address_among_the_matches():
    NodesList.seen = []
    with serving(NodesList) as url:
        node, reply = MasterClient(url, api_token="good", join_token="join").node_at(ASKED)
    assert reply.ok and node == PAGES[1][1]
    # Token, not the join token's Bearer; a master that ignores ?ip= lists every node, so
    # the next page is read until the address is exact.
    assert [auth for auth, _ in NodesList.seen] == ["Token good", "Token good"]
    assert [query["ip"] for _, query in NodesList.seen] == [ASKED, ASKED]
    assert [query["offset"] for _, query in NodesList.seen] == ["0", "1"]


def test_it_finds_nothing_when_no_address_is_exact():
    with serving(NodesList) as url:
        node, reply = MasterClient(url, api_token="good").node_at("10.0.0.10")
    assert node is None and reply.ok


def test_a_refused_token_is_the_reply_that_says_so():
    with serving(NodesList) as url:
        node, reply = MasterClient(url, api_token="stale").node_at(ASKED)
    assert node is None and reply.status == 401
    assert reply.reason() == "HTTP 401 (Invalid token.)"
