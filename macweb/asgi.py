"""ASGI entry point: Django for HTTP, Channels for the dashboard's WebSocket.

Not Django's stock handler, because it runs each request in a thread of its own: at
1,000 simultaneous registrations (bench/register.py, back to back on one machine,
issue 19) it took 3-4x the worker CPU (15.3 against 4.9 ms a new registration) and
282 of 1,000 re-registrations got 503 waiting for a pooled connection, against 0 here.

Nor Django's stock WSGI application under gunicorn's threaded worker with ASGI for
/ws/ only (the usual Channels split, issue 25), measured with bench/register.py
(--app wsgi, same machine, 2 workers of 8 threads, 3 bursts of 1,000; docs/benchmarks.md,
"stock WSGI"): API CPU per GET /health 7.16 ms against 5.48 ms here, per new
registration 10.61 against 9.19 ms, 84 against 123 /health and 69 against 80
registrations a second; only re-registrations cost less (14.10 against 16.44 ms). Both
runs on a machine loaded by other work (load 12-21 on 2 CPUs), so the figures are
rough, but every burst but one favours this handler, which also keeps one server.

The price: the methods of Django's handler called below are not documented API.
tests/macweb/test_asgi_handler.py fails, naming the method, when a Django release
changes one of them, and pyproject pins Django to 5.2.x until it is checked again.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402  (configured by django.setup)
from django.urls import get_resolver  # noqa: E402


class SyncMiddlewareASGIHandler(ASGIHandler):
    """Django's ASGI handler, serving each request with one hop to one of a few threads.

    Every middleware here can run either way, and in async mode Django moves each one's
    sync hooks to the request's thread and back: about fifteen thread hops per request.
    Here the chain runs in sync mode: the request_started signal, the middleware and a
    sync view, and for a response already in memory its close() (request_finished,
    which returns the thread's database connection to the pool), all in one thread
    after one hop; an async view (the dashboard's charts) is awaited from it on the
    event loop, holding only that thread. Django's own handler sent each of those two
    signals through a hop of its own to asgiref's one shared thread, and ran each
    request as two more tasks (the request, and a listener for the client going
    away, which cannot stop a sync view anyway): together a fifth of a worker's CPU
    at 1,000 registrations (docs/benchmarks.md). A streamed response (static files)
    is sent and closed as Django does.

    Django also gives every request a thread of its own (a ThreadSensitiveContext):
    a burst of 1,000 agents made 1,000 threads per worker, each started and joined,
    about a third of the worker's CPU, all contending for the GIL and for
    MAC_DB_POOL_SIZE connections, so that the last of them waited past the pool's
    timeout and got 503s. Here requests share MAC_API_THREADS threads per worker: the
    rest wait on the event loop, cheaply, and never for a connection.
    """

    def __init__(self) -> None:
        super().__init__()
        self.executor = ThreadPoolExecutor(
            max_workers=settings.API_THREADS, thread_name_prefix="mac-request"
        )

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    def _in_thread(self, func):
        return sync_to_async(func, thread_sensitive=False, executor=self.executor)

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        response = await self._in_thread(self._serve)(scope, body_file)
        try:
            await self.send_response(response, send)
        finally:
            if response.streaming:
                await self._in_thread(response.close)()
            body_file.close()

    def _serve(self, scope, body_file):
        set_script_prefix(get_script_prefix(scope))
        # request_started runs close_old_connections, as for a request's own thread.
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if response.streaming:
            # Closed once streamed, from another thread: return this one's connection now.
            close_old_connections()
        else:
            response.close()  # request_finished, here, in the thread that used the database
        return response


django_asgi_app = SyncMiddlewareASGIHandler()
# Load the URLconf (and the API modules it imports) now, not in the first request.
get_resolver().url_patterns  # noqa: B018

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.urls import re_path  # noqa: E402

from macweb.routing import MasterOriginValidator, websocket_urlpatterns  # noqa: E402

# The charts wait on Prometheus for up to MAC_DASHBOARD_PROMETHEUS_TIMEOUT. Under the
# handler above an async view is awaited from one of the worker's MAC_API_THREADS, so
# 32 charts on a hung Prometheus once held all 16 threads of a master and /health and
# registrations waited 11.5 s behind them (issue 26). Django's own handler awaits an
# async view on the event loop, its middleware and database calls taking a thread only
# for a moment: the charts go there, and wait on Prometheus holding no request thread
# (their bulkhead, MAC_BULKHEAD_PROMETHEUS, bounds how many may). The node page's
# scrape health (scrapes.json) asks Prometheus too, and goes the same way.
charts_asgi_app = get_asgi_application()

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                re_path(r"^nodes/[0-9]+/(charts/|scrapes\.json$)", charts_asgi_app),
                re_path(r"", django_asgi_app),
            ]
        ),
        "websocket": MasterOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
