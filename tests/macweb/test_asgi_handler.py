"""macweb.asgi subclasses Django's ASGIHandler and calls methods Django does not document.

Kept by measurement (issue 25: bench/register.py, docs/benchmarks.md). This test pins
what the subclass relies on, so that a Django upgrade that changes any of it fails
here, naming the method, rather than in production; pyproject pins Django to 5.2.x for
the same reason. If it fails: compare the method with the new Django's, adapt
macweb/asgi.py, and rerun bench/register.py against the stock handler.
"""

from __future__ import annotations

import inspect

import pytest
from django.core.handlers import asgi as django_asgi

from macweb.asgi import SyncMiddlewareASGIHandler

# Method -> (its parameters after self, a coroutine?) as macweb/asgi.py calls it.
RELIED_ON = {
    "read_body": (["receive"], True),
    "create_request": (["scope", "body_file"], False),
    "get_response": (["request"], False),
    "send_response": (["response", "send"], True),
    "load_middleware": (["is_async"], False),
}


@pytest.mark.parametrize("name", sorted(RELIED_ON))
def test_the_django_methods_the_handler_calls_keep_their_shape(name):
    method = getattr(django_asgi.ASGIHandler, name)
    params, is_coroutine = RELIED_ON[name]

    assert list(inspect.signature(method).parameters)[1:] == params, name
    assert inspect.iscoroutinefunction(method) is is_coroutine, name


def test_the_module_level_helpers_and_attributes_are_still_there():
    assert list(inspect.signature(django_asgi.get_script_prefix).parameters) == ["scope"]
    assert isinstance(django_asgi.ASGIHandler.chunk_size, int)
    assert issubclass(SyncMiddlewareASGIHandler, django_asgi.ASGIHandler)


async def test_a_request_goes_through_the_subclass_end_to_end():
    """One GET through the whole handler, in process: the calls above, put together."""
    from macweb.asgi import django_asgi_app

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/no-such-page", "raw_path": b"/no-such-page",
        "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }  # fmt: skip
    await django_asgi_app(scope, receive, send)

    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 404
    assert any(m["type"] == "http.response.body" for m in sent)
