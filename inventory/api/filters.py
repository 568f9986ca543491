"""Filters of the nodes list: status, GPU vendor, maintenance and labels."""

from __future__ import annotations

import re

import django_filters
from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from rest_framework.exceptions import ValidationError

from inventory.choices import GpuVendor, NodeStatus
from inventory.models import Node

_LABEL = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-/]{0,62})=(.{0,256})")


class NodeFilterSet(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=NodeStatus.choices)
    gpu_vendor = django_filters.MultipleChoiceFilter(choices=GpuVendor.choices)
    maintenance = django_filters.BooleanFilter()
    label = django_filters.CharFilter(
        method="filter_label", help_text="key=value: nodes whose label key has that value."
    )

    class Meta:
        model = Node
        fields = ["status", "gpu_vendor", "maintenance", "label"]

    def filter_label(self, queryset, name, value):
        match = _LABEL.fullmatch(value)
        if not match:
            raise ValidationError({"label": ["Use label=key=value, e.g. label=rack=a1."]})
        key, wanted = match.groups()
        # An explicit key transform takes keys containing "__" literally and, cast to
        # text, compares the same way on PostgreSQL and SQLite (`contains` does not).
        value = Cast(KeyTextTransform(key, "labels"), TextField())
        return queryset.alias(label_value=value).filter(label_value=wanted)
