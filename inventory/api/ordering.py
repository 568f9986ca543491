"""`?ordering=` of the nodes list, refused with a 400 when it names a field it cannot sort by.

DRF's OrderingFilter drops what it does not know and sorts by the default, so
`?ordering=last_seem` answers 200 in hostname order and a script never learns of its
typo; docs/api.md promises a malformed parameter is a 400 naming it.
"""

from __future__ import annotations

import re

from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter


class StrictOrderingFilter(OrderingFilter):
    def get_ordering(self, request, queryset, view):
        given = request.query_params.get(self.ordering_param)
        if given is not None and not given.strip():  # present and empty: not the default
            words = "give a field to sort by, or leave the parameter out."
            raise ValidationError({self.ordering_param: [words]})
        return super().get_ordering(request, queryset, view)

    def remove_invalid_fields(self, queryset, fields, view, request):
        valid = super().remove_invalid_fields(queryset, fields, view, request)
        wrong = [term for term in fields if term not in valid]
        if wrong:
            usable = ", ".join(name for name, _ in self.get_valid_fields(queryset, view))
            said = ", ".join(repr(term) for term in wrong)
            words = f"cannot sort by {said}; use one of {usable} (a leading - reverses)."
            raise ValidationError({self.ordering_param: [words]})
        return valid

    def get_schema_operation_parameters(self, view) -> list[dict]:
        """The schema says what the server takes: listed fields, comma-separated."""
        parameters = super().get_schema_operation_parameters(view)
        one = "-?(?:" + "|".join(re.escape(name) for name in view.ordering_fields) + ")"
        for parameter in parameters:
            parameter["schema"]["pattern"] = f"^{one}(?:,{one})*$"
            parameter["description"] = (
                f"Sort by {', '.join(view.ordering_fields)}; a leading - reverses, a comma "
                "adds a next key (e.g. -health_since,hostname)."
            )
        return parameters
