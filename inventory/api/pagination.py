"""Paging of the nodes list: limit and offset, refused with a 400 when they are not numbers.

DRF's LimitOffsetPagination quietly falls back to its defaults for `?offset=null` or
`?limit=-1`, so a script with a bug pages through the wrong rows without noticing,
and the schema's "integer" is not what the server does. Both are bounded, too: an
offset past a 64-bit integer would reach the database as an error.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 100_000
MAX_OFFSET = 1_000_000_000


class StrictLimitOffsetPagination(LimitOffsetPagination):
    # (minimum, maximum) of each parameter, also published in the schema.
    bounds = {"limit": (1, MAX_LIMIT), "offset": (0, MAX_OFFSET)}

    def _number(self, request, name: str, default: int | None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        low, high = self.bounds[name]
        # The length first: int() refuses strings of more than 4,300 digits (ValueError).
        fits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(high))
        if not (fits and low <= int(raw) <= high):
            raise ValidationError({name: [f"must be a whole number from {low} to {high}."]})
        return int(raw)

    def get_limit(self, request) -> int | None:
        return self._number(request, self.limit_query_param, self.default_limit)

    def get_offset(self, request) -> int:
        return self._number(request, self.offset_query_param, 0)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            low, high = self.bounds[parameter["name"]]
            parameter["schema"].update({"minimum": low, "maximum": high})
        return parameters
