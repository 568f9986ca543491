"""The one filter of the node list, shared by the API and the dashboard's fleet page.

`GET /api/v1/nodes/` and `/` (with `/fleet.json`) take the same parameters with the same
meaning: `status`, `gpu_vendor`, `health` (the GPU verdict's state), `drained` (`mac`
or `admin`: who holds the node out of service in Slurm) and `ip` (the node at exactly
that address, where `search` finds 10.0.0.17 for 10.0.0.1 too; repeat each for
several), `maintenance` and `needs_action` (`true` or `false`: the verdict asks an
operator to reset a GPU, reboot or inspect the hardware), `label` (`key=value`) and
`search`. A parameter that is present but malformed is an error naming it, never
silently ignored: `?maintenance=yes`, `?label=` or `?ip=10.0.0` returning the whole
fleet would hand a script, or an operator, the wrong nodes. The API answers it with a
400; the fleet page shows the message (see macweb.dashboard.views).
"""

from __future__ import annotations

import re

import django_filters
from django import forms
from django.db.models import Q, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from drf_spectacular.utils import extend_schema_field

from contract.verdicts import OPERATOR_ACTIONS
from inventory.addresses import AddressRefused, parse_canonical
from inventory.choices import GpuVendor, HealthState, NodeStatus, SlurmHold
from inventory.models import Node
from inventory.validators import MAX_HOSTNAME, TEXT_PATTERN

_LABEL = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-/]{0,62})=([^\x00\n]{0,256})")
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}=[^\u0000\n]{0,256}$"
LABEL_HELP = "key=value, e.g. rack=a1: nodes whose label key has that value."
SEARCH_HELP = (
    "Words to find in the host name, address or machine-id; a node matches when each "
    "word is in one of them."
)
SEARCH_FIELDS = ("hostname", "ip", "machine_id")


class StrictBooleanField(forms.Field):
    """`true` or `false`; anything else present is an error (absent means no filter)."""

    def clean(self, value):
        if value is None:
            return None
        if value in ("true", "false"):
            return value == "true"
        raise forms.ValidationError("Use true or false.")


class LabelField(forms.Field):
    """`key=value`; present and malformed (empty included) is an error."""

    def clean(self, value):
        if value is None:
            return None
        match = _LABEL.fullmatch(value)
        if not match:
            raise forms.ValidationError("Use label=key=value, e.g. label=rack=a1.")
        return match.groups()


class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


@extend_schema_field({"type": "string", "pattern": LABEL_PATTERN})
class LabelFilter(django_filters.Filter):
    field_class = LabelField

    def filter(self, queryset, value):
        if value is None:
            return queryset
        key, wanted = value
        # An explicit key transform takes keys containing "__" literally and, cast to
        # text, compares the same way on PostgreSQL and SQLite (`contains` does not).
        label = Cast(KeyTextTransform(key, "labels"), TextField())
        return queryset.alias(label_value=label).filter(label_value=wanted)


@extend_schema_field({"type": "string", "maxLength": MAX_HOSTNAME, "pattern": TEXT_PATTERN})
class SearchFilter(django_filters.CharFilter):
    """Each word (split on spaces and commas) in one of SEARCH_FIELDS, any case.

    At most MAX_HOSTNAME characters, the longest host name there can be; a NUL is
    refused by the form field.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(max_length=MAX_HOSTNAME, **kwargs)

    def filter(self, queryset, value):
        for word in (value or "").replace(",", " ").split():
            anywhere = Q()
            for field in SEARCH_FIELDS:
                anywhere |= Q(**{f"{field}__icontains": word})
            queryset = queryset.filter(anywhere)
        return queryset


# The longest text of an address: six IPv6 groups and a dotted quad.
MAX_ADDRESS = 45
IP_HELP = (
    "A node's address, exactly (search finds 10.0.0.17 for 10.0.0.1 too): an IPv4 or IPv6 "
    "address, compared in the form the inventory stores it; repeat for several."
)
IP_USAGE = "Use ip=<IPv4 or IPv6 address>, e.g. ip=10.0.0.17 (search= finds host names)."


class AddressesField(forms.Field):
    """Every `ip` given, each an IPv4 or IPv6 address in its stored (canonical) form.

    Read by the rules of a registration's address (inventory.addresses.parse_canonical),
    less its policy: a filter may name any address, it just matches no node. Present and
    malformed (empty included) is an error.
    """

    widget = forms.MultipleHiddenInput  # every repeated ?ip=, not the last one only

    def clean(self, value):
        addresses = []
        for text in value or []:
            if not text or len(text) > MAX_ADDRESS:
                raise forms.ValidationError(IP_USAGE)
            try:
                # str() writes an IPv6 address compressed and in lower case, as stored.
                addresses.append(str(parse_canonical(text)))
            except AddressRefused as exc:
                # As a parameter: the reason quotes the value, which may hold a "%"
                # (a zone id), and the message is %-formatted on its way out.
                raise forms.ValidationError(
                    f"%(reason)s {IP_USAGE}", params={"reason": str(exc)}
                ) from None
        return addresses


_ADDRESS_SCHEMA = {"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}


@extend_schema_field({"type": "array", "items": _ADDRESS_SCHEMA, "description": IP_HELP})
class AddressFilter(django_filters.Filter):
    """`ip`: the nodes at these addresses (one each at most: an address is unique)."""

    field_class = AddressesField

    def __init__(self, **kwargs) -> None:
        super().__init__(field_name="ip", lookup_expr="in", **kwargs)


NEEDS_ACTION_HELP = (
    "true: nodes whose GPU verdict asks an operator to act (reset_gpu, reboot, "
    "inspect_hardware); false: the others."
)


class NeedsActionFilter(StrictBooleanFilter):
    """The verdict's action is an operator's (contract.verdicts.OPERATOR_ACTIONS)."""

    def filter(self, queryset, value):
        if value is None:
            return queryset
        wanted = Q(health_action__in=[str(action) for action in OPERATOR_ACTIONS])
        return queryset.filter(wanted if value else ~wanted)


class NodeFilterSet(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=NodeStatus.choices)
    gpu_vendor = django_filters.MultipleChoiceFilter(choices=GpuVendor.choices)
    health = django_filters.MultipleChoiceFilter(
        field_name="health_state",
        choices=HealthState.choices,
        help_text="The node's GPU verdict: healthy, degraded or unhealthy.",
    )
    needs_action = NeedsActionFilter(help_text=NEEDS_ACTION_HELP)
    drained = django_filters.MultipleChoiceFilter(
        field_name="slurm_hold",
        choices=[choice for choice in SlurmHold.choices if choice[0]],
        help_text="Drained in Slurm: mac (drained by MAC for its GPU verdict) or admin "
        "(drained or down by anyone else), as the last drain pass read it.",
    )
    maintenance = StrictBooleanFilter()
    label = LabelFilter(help_text=LABEL_HELP)
    ip = AddressFilter(help_text=IP_HELP)
    search = SearchFilter(help_text=SEARCH_HELP)

    class Meta:
        model = Node
        fields = ["status", "gpu_vendor", "health", "needs_action", "drained", "maintenance",
                  "label", "ip", "search"]  # fmt: skip
