"""The OpenAPI schema view: one schema generation at a time per process.

drf-spectacular resolves its extension classes lazily, and not thread-safely: when
several threads of a fresh process generate the schema at once, some of them fail in
the extension loader with an AttributeError, a 500 for the client (seen by the
schemathesis test; tfranzel/drf-spectacular#1122). Generation takes a fraction of a
second and is rare, so a lock around it costs nothing that matters.
"""

from __future__ import annotations

import threading

from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView


class SchemaView(SpectacularAPIView):
    _generating = threading.Lock()

    @extend_schema(exclude=True)  # as the view it wraps: the schema is not in itself
    def get(self, request, *args, **kwargs):
        with self._generating:
            return super().get(request, *args, **kwargs)
