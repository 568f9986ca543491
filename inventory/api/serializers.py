"""Serializers of the nodes API: strict input for agents, explicit fields for output.

Agent input is checked strictly (a number where a string belongs is an error, not
converted) because a quietly coerced value ends up on the dashboard and in
Prometheus labels; every refusal names its field.
"""

from __future__ import annotations

import copy
import math
import re

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from contract.master_api import REPORTED_FIELDS
from contract.verdicts import Evidence, gpu_fix
from inventory.choices import AgentNetwork, GpuVendor
from inventory.models import SUMMARY_FIELDS, GpuHealth, Node, NodeEvent
from inventory.validators import (
    LABEL_KEY,
    LABEL_KEY_HELP,
    MAX_EXPORTERS,
    MAX_GPUS,
    MAX_HOSTNAME,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_NIC_KEY,
    MAX_NIC_KEYS,
    MAX_NIC_VALUE,
    MAX_NICS,
    SERVICE_NAME,
    SERVICE_NAME_HELP,
    TEXT_PATTERN,
    check_keys,
    check_nic,
    normalize_hostname,
)

RECENT_EVENTS = 20

# The same rules as OpenAPI patterns, so that the schema accepts exactly what the server
# does (schemathesis checks both ways: tests/inventory/test_api_fuzz.py).
_HOST_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_HOSTNAME,
    "pattern": f"^{_HOST_LABEL}(\\.{_HOST_LABEL})*$",
}
_NIC_NUMBER = {"type": "number", "minimum": -(2**63), "maximum": 2**64 - 1}


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A BooleanField that takes JSON's true and false only: DRF's own also reads "yes",
    "on", 1 and "true", so a script's typo would switch something on."""

    default_error_messages = {"invalid": "Must be a JSON boolean: true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictIntegerField(serializers.IntegerField):
    """An IntegerField that refuses strings, fractions and booleans.

    A float with no fractional part (8.0) is taken: JSON Schema, and so the OpenAPI
    schema, counts it as an integer.
    """

    def to_internal_value(self, data):
        if isinstance(data, float) and math.isfinite(data) and data.is_integer():
            data = int(data)
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(HOSTNAME_SCHEMA)
class HostnameField(StrictCharField):
    """An RFC 1123 hostname, lower-cased."""

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("max_length", None)
        # Refused, not trimmed: the schema's pattern has no blanks, and the server takes
        # exactly what the schema says.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> str:
        value = super().to_internal_value(data)
        try:
            return normalize_hostname(value)
        except ValueError as exc:
            raise serializers.ValidationError(f"Hostname {exc}") from None


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_NIC_KEYS,
        "propertyNames": {"maxLength": MAX_NIC_KEY, "pattern": TEXT_PATTERN},
        "additionalProperties": {
            "description": "a string, number, boolean or null",
            "oneOf": [
                {"type": "string", "maxLength": MAX_NIC_VALUE, "pattern": TEXT_PATTERN},
                {"type": "boolean"},
                {"type": "null"},
                _NIC_NUMBER,
            ],
        },
        "example": {"name": "mlx5_0", "netdev": "ens1f0", "vendor": "mellanox", "port": 1},
    }
)
class NicField(serializers.Field):
    """One NIC as the agent describes it: a flat JSON object of scalar values."""

    def to_internal_value(self, data) -> dict:
        try:
            return check_nic(data)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value


class LimitedDictField(serializers.DictField):
    """A JSON object with a cap on its entries and a pattern for its keys."""

    def __init__(self, *, max_entries: int, key_pattern: re.Pattern, key_help: str, **kwargs):
        self.max_entries = max_entries
        self.key_pattern = key_pattern
        self.key_help = key_help
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> dict:
        if not isinstance(data, dict):
            self.fail("not_a_dict", input_type=type(data).__name__)
        try:
            check_keys(data, max_entries=self.max_entries, key_pattern=self.key_pattern,
                       key_help=self.key_help)  # fmt: skip
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return super().to_internal_value(data)


class StrictCharFieldSchema(OpenApiSerializerFieldExtension):
    """Text fields in the schema: no NUL, and at least one character unless blank is allowed."""

    target_class = StrictCharField

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if self.target.allow_blank:
            # A bare "pattern" would make drf-spectacular add a oneOf with "" that "" then
            # matches twice; the pattern matches "" anyway.
            schema["allOf"] = [{"pattern": TEXT_PATTERN}]
        else:
            schema["pattern"] = TEXT_PATTERN
            schema["minLength"] = max(schema.get("minLength", 0), 1)
        return schema


class LimitedDictFieldSchema(OpenApiSerializerFieldExtension):
    """LimitedDictField in the schema: its entry cap and its key pattern."""

    target_class = LimitedDictField

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        schema = auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        schema["maxProperties"] = field.max_entries
        schema["propertyNames"] = {"pattern": f"^{field.key_pattern.pattern}$"}
        return schema


class RegistrationSerializer(serializers.Serializer):
    """Body of POST /api/v1/register: one field for each of the contract's REGISTRATION_FIELDS.

    Only how each is checked is written here; which fields there are is the contract's.
    """

    hostname = HostnameField(help_text="RFC 1123 host name; stored lower-cased.")
    ip = StrictCharField(
        required=False,
        # An address with blanks around it is refused, not trimmed into "" (or into shape).
        trim_whitespace=False,
        help_text="Claimed address; honoured only with a valid join token, else the "
        "request's source address is used.",
    )
    gpu_vendor = serializers.ChoiceField(choices=GpuVendor.choices, default=GpuVendor.NONE)
    gpu_count = StrictIntegerField(min_value=0, max_value=MAX_GPUS, default=0)
    gpu_model = StrictCharField(max_length=64, allow_blank=True, default="")
    agent_network = serializers.ChoiceField(
        choices=AgentNetwork.choices,
        default=AgentNetwork.UNKNOWN,
        help_text="host: every exporter on the host network; bridge: published ports. "
        "Empty from agents older than the mode.",
    )
    nics = serializers.ListField(child=NicField(), max_length=MAX_NICS, default=list)
    exporters = LimitedDictField(
        child=StrictIntegerField(min_value=1, max_value=65535),
        max_entries=MAX_EXPORTERS,
        key_pattern=SERVICE_NAME,
        key_help=SERVICE_NAME_HELP,
        default=dict,
        help_text='{service name: port}, e.g. {"sys-exporter": 29101}.',
    )
    agent_version = StrictCharField(max_length=64, allow_blank=True, default="")
    machine_id = StrictCharField(max_length=64, allow_blank=True, default="")
    labels = LimitedDictField(
        child=StrictCharField(max_length=MAX_LABEL_VALUE, allow_blank=True),
        max_entries=MAX_LABELS,
        key_pattern=LABEL_KEY,
        key_help=LABEL_KEY_HELP,
        default=dict,
    )


class DeregistrationSerializer(serializers.Serializer):
    """Body of POST /api/v1/deregister."""

    hostname = HostnameField()


class DeregistrationResponseSerializer(serializers.Serializer):
    hostname = serializers.CharField()
    deregistered = serializers.BooleanField()


class ModelFieldsOnce:
    """A ModelSerializer that works out its fields from the model once per class.

    ModelSerializer builds every field from the model's definition (labels, choices,
    validators) for each instance; a plain Serializer deep-copies fields declared once,
    and so does this, from the fields built for the first instance. Measured with
    bench/register.py (1,000 new registrations at once through the proxy, issue 19, a
    2-CPU host at load 9-16): building the response's fields was 29% of the API
    server's samples, and its CPU per new registration 2.70x and 2.90x a /health's in
    two runs (target 2.5x); with this 2.22x to 2.46x in five. Rendering one
    registration's response: 3.1 ms, 1.8 ms with this.
    """

    def get_fields(self) -> dict:
        cls = type(self)
        built = cls.__dict__.get("_fields_built_once")
        if built is None:
            built = super().get_fields()
            cls._fields_built_once = built
        return copy.deepcopy(built)


class NodeEventSerializer(ModelFieldsOnce, serializers.ModelSerializer):
    class Meta:
        model = NodeEvent
        fields = ["id", "kind", "message", "actor", "data", "created_at"]


class EvidenceSerializer(serializers.Serializer):
    """One reason behind a GPU's verdict (contract.verdicts.Evidence)."""

    source = serializers.CharField(help_text="xid, recovery_action, ecc, row_remap, lost, "
                                   "missing, nvlink, throttle, amd_health or repeat")  # fmt: skip
    code = serializers.CharField(help_text='e.g. "79" for XID 79, "pending" for a row remap')
    detail = serializers.CharField()
    state = serializers.CharField()
    action = serializers.CharField()
    at = serializers.FloatField(help_text="Unix time it happened or was first seen (0: unknown)")
    words = serializers.CharField(help_text="the evidence in one line, as the node page says it")


class GpuHealthSerializer(ModelFieldsOnce, serializers.ModelSerializer):
    """One GPU's verdict: state, suggested action, its evidence, and what to do."""

    evidence = serializers.SerializerMethodField()
    fix = serializers.SerializerMethodField()

    class Meta:
        model = GpuHealth
        fields = ["index", "uuid", "serial", "vendor", "state", "action", "fix", "evidence",
                  "since", "updated"]  # fmt: skip

    @extend_schema_field(EvidenceSerializer(many=True))
    def get_evidence(self, gpu: GpuHealth) -> list[dict]:
        items = [Evidence.from_dict(item) for item in gpu.evidence or []]
        return [{**item.as_dict(), "words": item.words()} for item in items]

    def get_fix(self, gpu: GpuHealth) -> str:
        """What a person does for the suggested action, its commands naming this GPU ("" for
        none)."""
        return gpu_fix(gpu.action, str(gpu.index), gpu.uuid, gpu.vendor)


class NodeSerializer(ModelFieldsOnce, serializers.ModelSerializer):
    """A node in the nodes list: the fields the dashboard shows too."""

    class Meta:
        model = Node
        fields = list(SUMMARY_FIELDS)


class NodeDetailSerializer(NodeSerializer):
    """A node with everything the agent reported, its GPUs' verdicts and recent events."""

    events = serializers.SerializerMethodField()
    gpus = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [
            *NodeSerializer.Meta.fields,
            *(name for name in REPORTED_FIELDS if name not in NodeSerializer.Meta.fields),
            "health_streak",
            "boot_id",
            "gpus",
            "updated_at",
            "events",
        ]

    @extend_schema_field(GpuHealthSerializer(many=True))
    def get_gpus(self, node: Node) -> list[dict]:
        return GpuHealthSerializer(node.gpus.all(), many=True).data

    @extend_schema_field(NodeEventSerializer(many=True))
    def get_events(self, node: Node) -> list[dict]:
        # A caller that holds the node's whole history (a node registered just now)
        # passes it as "recent_events": no query then.
        recent = self.context.get("recent_events")
        if recent is None:
            recent = node.events.all()[:RECENT_EVENTS]
        return NodeEventSerializer(recent, many=True).data


class RegistrationResponseSerializer(NodeDetailSerializer):
    """The node's detail, plus its key when one was issued by this registration."""

    node_key = serializers.CharField(
        required=False,
        help_text="Present only when a key was issued (first registration, or after an "
        "admin reset). Shown once; keep it for re-registration and deregistration.",
    )

    class Meta(NodeDetailSerializer.Meta):
        fields = [*NodeDetailSerializer.Meta.fields, "node_key"]

    def to_representation(self, node: Node) -> dict:
        # The key is no attribute of the node (only its hash is stored): the view
        # passes the one just issued in the context.
        data = super().to_representation(node)
        if self.context.get("node_key"):
            data["node_key"] = self.context["node_key"]
        return data


class ErrorSerializer(serializers.Serializer):
    """{"detail": "..."} for 401/403/404/409/429; 400 bodies name the field instead."""

    detail = serializers.CharField()
