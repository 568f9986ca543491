"""Filters of the nodes list: status, GPU vendor, maintenance, labels and search.

A parameter that is present but malformed is a 400 naming it, never silently
ignored: `?maintenance=yes` or `?label=` returning the whole fleet would hand a
script the wrong nodes. The schema states the same formats (see NodeViewSet).
"""

from __future__ import annotations

import re

import django_filters
from django import forms
from django.db.models import TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from drf_spectacular.utils import extend_schema_field
from rest_framework import filters
from rest_framework.exceptions import ValidationError

from inventory.api.serializers import TEXT_PATTERN
from inventory.choices import GpuVendor, NodeStatus
from inventory.models import Node

_LABEL = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-/]{0,62})=([^\x00\n]{0,256})")
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}=[^\u0000\n]{0,256}$"
LABEL_HELP = "key=value, e.g. rack=a1: nodes whose label key has that value."


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


class NodeFilterSet(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=NodeStatus.choices)
    gpu_vendor = django_filters.MultipleChoiceFilter(choices=GpuVendor.choices)
    maintenance = StrictBooleanFilter()
    label = LabelFilter(help_text=LABEL_HELP)

    class Meta:
        model = Node
        fields = ["status", "gpu_vendor", "maintenance", "label"]


class NodeSearchFilter(filters.SearchFilter):
    """DRF's search, whose refusals (a NUL in ?search=) name the parameter."""

    def get_search_terms(self, request):
        try:
            return super().get_search_terms(request)
        except ValidationError as exc:
            raise ValidationError({self.search_param: exc.detail}) from None

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["pattern"] = TEXT_PATTERN
        return parameters
