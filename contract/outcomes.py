"""How a probe ends and what a node's pattern of answers means, as plain values.

The inventory stores these values (inventory.choices builds its Django choices from
them), the sweep and `mac probe` produce them: one list, so the two sides cannot
drift apart.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """How one probe of one liveness URL ended."""

    OK = "ok"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    HTTP_STATUS = "http_status"
    BAD_BODY = "bad_body"
    ERROR = "error"


OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.OK: "sys-exporter answered",
    Outcome.TIMEOUT: "sys-exporter timed out",
    Outcome.REFUSED: "connection refused",
    Outcome.UNREACHABLE: "host unreachable",
    Outcome.HTTP_STATUS: "unexpected HTTP status",
    Outcome.BAD_BODY: "not a Prometheus exposition",
    Outcome.ERROR: "probe error",
}


class Diagnosis(StrEnum):
    """Why a node is offline, read off its probes (flow 5 of the contract)."""

    NONE = ""
    IP_FORWARD_OFF = "ip_forward_off"
    SERVICE_DOWN = "service_down"
    HOST_DOWN = "host_down"
    EXPORTER_BROKEN = "exporter_broken"
    # Host mode: 29101 times out while the host answers on other ports; forwarding
    # plays no part, so sys-exporter hangs or a host firewall drops its port.
    PORT_BLOCKED = "port_blocked"


DIAGNOSIS_LABELS: dict[Diagnosis, str] = {
    Diagnosis.NONE: "-",
    Diagnosis.IP_FORWARD_OFF: "IPv4 forwarding is off on the agent",
    Diagnosis.SERVICE_DOWN: "the exporter service is down",
    Diagnosis.HOST_DOWN: "host down or network cut",
    Diagnosis.EXPORTER_BROKEN: "the exporter answers but is broken",
    Diagnosis.PORT_BLOCKED: "sys-exporter hangs or a host firewall drops its port",
}
