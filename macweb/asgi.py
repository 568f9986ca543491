"""ASGI entry point: Django for HTTP, Channels for the dashboard's WebSocket."""

import os
from concurrent.futures import ThreadPoolExecutor

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "macweb.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402  (configured by django.setup)
from django.urls import get_resolver  # noqa: E402


class SyncMiddlewareASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain run in sync mode, on a few threads.

    Every middleware here can run either way, and in async mode Django moves each one's
    sync hooks to the request's thread and back: about fifteen thread hops per request.
    In sync mode the chain and a sync view run in one thread after one hop; an async
    view (the dashboard's charts) is awaited from it on the event loop, holding only
    that thread.

    Django also gives every request a thread of its own (a ThreadSensitiveContext):
    a burst of 1,000 agents made 1,000 threads per worker, each started and joined,
    about a third of the worker's CPU (docs/benchmarks.md), all contending for the
    GIL and for MAC_DB_POOL_SIZE connections, so that the last of them waited past the
    pool's timeout and got 503s. Here requests share MAC_API_THREADS threads per
    worker: the rest wait on the event loop, cheaply, and never for a connection.
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

    async def get_response_async(self, request):
        serve = sync_to_async(self._serve, thread_sensitive=False, executor=self.executor)
        return await serve(request)

    def _serve(self, request):
        # What request_started and request_finished do for a request's own thread: those
        # signals now run in another one, so this thread returns its database connection
        # (to the pool) itself, and drops a broken one, as Django would.
        close_old_connections()
        try:
            return self.get_response(request)
        finally:
            close_old_connections()


django_asgi_app = SyncMiddlewareASGIHandler()
# Load the URLconf (and the API modules it imports) now, not in the first request.
get_resolver().url_patterns  # noqa: B018

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from macweb.routing import MasterOriginValidator, websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": MasterOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
