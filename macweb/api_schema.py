"""The OpenAPI schema view: generated once per process and format, one generation at a time.

drf-spectacular resolves its extension classes lazily, and not thread-safely: when
several threads of a fresh process generate the schema at once, some of them fail in
the extension loader with an AttributeError, a 500 for the client (seen by the
schemathesis test; tfranzel/drf-spectacular#1122). Hence the lock. And as the schema is
public (SERVE_PUBLIC: the same for every caller) and only changes with the code, each
format's answer is kept for the process's life: the lock used to queue every
/api/v1/docs reader behind a full generation, which under load was seconds. A request
for another language (where translations are on) is answered fresh, never kept (its
words are the caller's: a cache keyed by them could be grown without end). The API has
one version, in its path (/api/v1/): `?version=` is not a caller's to choose
(drf-spectacular would take any word where no versions are listed, and each would be a
full generation under the lock, for anyone), so the view's own version stands.
"""

from __future__ import annotations

import threading

from django.conf import settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    # The one version (/api/v1/): it outranks ?version= in drf-spectacular's view.
    api_version = settings.SPECTACULAR_SETTINGS["VERSION"]
    _generating = threading.Lock()
    _kept: dict[str, tuple[dict, dict[str, str]]] = {}

    @extend_schema(exclude=True)  # as the view it wraps: the schema is not in itself
    def get(self, request, *args, **kwargs):
        # `lang` changes the schema only where translations are on (drf-spectacular).
        own_words = settings.USE_I18N and request.GET.get("lang")
        renderer = self.perform_content_negotiation(request, force=True)[0].format
        with self._generating:
            kept = None if own_words else self._kept.get(renderer)
            if kept is None:
                response = super().get(request, *args, **kwargs)
                # Its file name; the renderer sets the type, DRF the rest, at each answer.
                kept = (response.data, {"Content-Disposition": response["Content-Disposition"]})
                if not own_words:
                    self._kept[renderer] = kept
        data, headers = kept
        return Response(data, headers=headers)
