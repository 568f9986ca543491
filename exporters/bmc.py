"""bmc-agent: the node's BMC sensors over Redfish or IPMI, with ipmi_exporter's names.

Redfish is used when ``MAC_BMC_REDFISH_URL`` is set (credentials in
``MAC_BMC_REDFISH_USER`` / ``MAC_BMC_REDFISH_PASSWORD``; certificate checks with
``MAC_BMC_REDFISH_VERIFY_TLS=1``, off by default because BMCs ship self-signed
certificates), read from the node's settings like every exporter's (the process
environment, then the per-node and per-user files; a bad one is reported by ``ipmi_up``
and ``/health``, never a crash). Otherwise ``ipmitool`` talks to the local BMC through
``/dev/ipmi0``. Either way the samples are ipmi_exporter's families
(``ipmi_temperature_celsius``, ``ipmi_fan_speed_rpm``, ``ipmi_voltage_volts``,
``ipmi_power_watts``, ``ipmi_sensor_state``, ``ipmi_dcmi_power_consumption_watts``,
``ipmi_chassis_power_state``, ``ipmi_up``), so existing IPMI dashboards work.
A BMC whose Redfish JSON is not of the shape Redfish gives (``"Members": null``, a list
for an object) is unavailable like one that does not answer: ``ipmi_up`` 0 and the
reason "malformed answer: ..." in ``/health``.
``/health`` says whether the BMC answers; the process serves either way.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from exporters.runtime import BackendStatus, Exporter, Options
from node.config import ConfigError, NodeConfig, node_config
from node.host import Roots

log = logging.getLogger("exporters")

# ipmi_exporter's state encoding: 0 nominal, 1 warning, 2 critical.
STATES = {"ok": 0.0, "nc": 1.0, "cr": 2.0, "nr": 2.0, "lnc": 1.0, "unc": 1.0, "lcr": 2.0}
REDFISH_HEALTH = {"OK": 0.0, "Warning": 1.0, "Critical": 2.0}
HEALTH_CACHE_SECONDS = 30.0

CommandRunner = Callable[[list[str]], str]


@dataclass
class Sensor:
    """One BMC reading, whichever protocol it came from."""

    id: str
    name: str
    type: str  # temperature, fan, voltage, power, current, other
    value: float | None
    state: float | None  # 0 nominal, 1 warning, 2 critical; None unknown


UNITS = {
    "degrees C": "temperature",
    "RPM": "fan",
    "Volts": "voltage",
    "Watts": "power",
    "Amps": "current",
}
SDR_VALUE = re.compile(r"^\s*(-?[\d.]+)\s+(degrees C|RPM|Volts|Watts|Amps)\s*$")


def parse_sdr_elist(text: str) -> list[Sensor]:
    """Parse ``ipmitool sdr elist``: ``name | id | state | entity | reading``."""
    sensors = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) != 5:
            continue
        name, sensor_id, state, _entity, reading = parts
        match = SDR_VALUE.match(reading)
        sensor_type = UNITS[match.group(2)] if match else "other"
        value = float(match.group(1)) if match else None
        # "ns" (no reading) sensors are absent hardware: no state either.
        sensors.append(
            Sensor(
                id=str(int(sensor_id.rstrip("h"), 16)) if sensor_id.endswith("h") else sensor_id,
                name=name,
                type=sensor_type,
                value=value,
                state=STATES.get(state),
            )
        )
    return sensors


def parse_dcmi_power(text: str) -> float | None:
    """The instantaneous reading of ``ipmitool dcmi power reading`` in watts."""
    match = re.search(r"Instantaneous power reading:\s*([\d.]+)\s*Watts", text)
    return float(match.group(1)) if match else None


def parse_chassis_power(text: str) -> float | None:
    """``Chassis Power is on`` -> 1.0, ``off`` -> 0.0."""
    match = re.search(r"Chassis Power is (on|off)", text)
    return None if not match else 1.0 if match.group(1) == "on" else 0.0


class MalformedAnswer(ValueError):
    """A BMC answer that is not what Redfish says it is (JSON of another shape): the BMC
    is then unavailable, with this as the reason, like one that does not answer."""


def _shape(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _objects(doc: Mapping, key: str, where: str, required: bool = False) -> list[Mapping]:
    """doc[key] as Redfish's array of objects; absent (or null, unless required) is empty."""
    value = doc.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise MalformedAnswer(f"{where}: {key} is {_shape(value)}, not a list of objects")
    return value


def _link(value: object, what: str, where: str) -> str:
    """The ``@odata.id`` of a Redfish link (``{"@odata.id": "/redfish/v1/..."}``)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("@odata.id"), str):
        raise MalformedAnswer(f"{where}: {what} is {_shape(value)}, not a link")
    return value["@odata.id"]


def _number(item: Mapping, key: str, where: str) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedAnswer(f"{where}: {key} is {_shape(value)}, not a number")
    return float(value)


def _status(item: Mapping) -> Mapping:
    status = item.get("Status")
    return status if isinstance(status, Mapping) else {}


def _health(status: Mapping | None) -> float | None:
    status = status or {}
    if status.get("State") in ("Absent", "Disabled", "UnavailableOffline"):
        return None
    return REDFISH_HEALTH.get(status.get("Health"))


def _present(members: Iterable[Mapping]) -> Iterator[tuple[int, Mapping]]:
    """(index, member) of a Redfish collection, leaving out members that are Absent."""
    for index, item in enumerate(members):
        if _status(item).get("State") != "Absent":
            yield index, item


def _redfish_sensor(index: int, item: Mapping, name: object, kind: str, value) -> Sensor:
    return Sensor(
        id=str(item.get("MemberId", index)),
        name=str(name),
        type=kind,
        value=value,
        state=_health(_status(item)),
    )


def parse_redfish_thermal(doc: Mapping, where: str = "Thermal") -> list[Sensor]:
    """Temperatures and fans of a Redfish ``Thermal`` resource."""
    sensors = [
        _redfish_sensor(
            index,
            item,
            item.get("Name", f"Temperature {index}"),
            "temperature",
            _number(item, "ReadingCelsius", where),
        )
        for index, item in _present(_objects(doc, "Temperatures", where))
    ]
    for index, item in _present(_objects(doc, "Fans", where)):
        name = item.get("Name") or item.get("FanName") or f"Fan {index}"
        kind = "fan" if item.get("ReadingUnits", "RPM") == "RPM" else "other"
        sensors.append(_redfish_sensor(index, item, name, kind, _number(item, "Reading", where)))
    return sensors


def parse_redfish_power(doc: Mapping, where: str = "Power") -> tuple[list[Sensor], float | None]:
    """Voltages, PSUs and power controls of a Redfish ``Power`` resource, and total watts."""
    sensors = []
    consumed = None
    for index, item in enumerate(_objects(doc, "PowerControl", where)):
        watts = _number(item, "PowerConsumedWatts", where)
        if watts is not None:
            consumed = (consumed or 0.0) + watts
            name = item.get("Name", f"Power Control {index}")
            sensors.append(_redfish_sensor(index, item, name, "power", watts))
    for index, item in _present(_objects(doc, "Voltages", where)):
        name = item.get("Name", f"Voltage {index}")
        volts = _number(item, "ReadingVolts", where)
        sensors.append(_redfish_sensor(index, item, name, "voltage", volts))
    for index, item in _present(_objects(doc, "PowerSupplies", where)):
        name = item.get("Name", f"PSU {index}")
        watts = _number(item, "PowerOutputWatts", where)
        if not watts:
            watts = _number(item, "LastPowerOutputWatts", where)
        sensors.append(_redfish_sensor(index, item, name, "power_supply", watts))
    return sensors, consumed


@dataclass
class BmcReading:
    sensors: list[Sensor]
    dcmi_watts: float | None
    chassis_on: float | None


class RedfishClient:
    """A few GETs against a BMC's Redfish service, with basic auth and a timeout."""

    def __init__(
        self,
        url: str,
        user: str = "",
        password: str = "",
        verify_tls: bool = False,
        timeout: float = 5.0,
    ):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.headers = {"Accept": "application/json"}
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        self.context = ssl.create_default_context()
        if not verify_tls:
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE

    def get(self, path: str) -> dict:
        target = path if path.startswith("http") else f"{self.url}{path}"
        if not target.startswith(("http://", "https://")):
            raise ValueError(f"MAC_BMC_REDFISH_URL must be http(s)://...: {self.url!r}")
        request = urllib.request.Request(target, headers=self.headers)  # noqa: S310 (checked above)
        with urllib.request.urlopen(  # noqa: S310
            request, timeout=self.timeout, context=self.context
        ) as response:
            try:
                answer = json.load(response)
            except ValueError as exc:
                raise MalformedAnswer(f"{path}: not JSON ({exc})") from None
        if not isinstance(answer, dict):
            raise MalformedAnswer(f"{path}: {_shape(answer)} is not a JSON object")
        return answer

    def read(self) -> BmcReading:
        sensors: list[Sensor] = []
        consumed = None
        chassis_on = None
        collection = "/redfish/v1/Chassis"
        for member in _objects(self.get(collection), "Members", collection, required=True):
            path = _link(member, "a member of Members", collection)
            chassis = self.get(path)
            if chassis.get("PowerState") and chassis_on is None:
                chassis_on = 1.0 if chassis["PowerState"] == "On" else 0.0
            if "Thermal" in chassis:
                thermal = _link(chassis["Thermal"], "Thermal", path)
                sensors += parse_redfish_thermal(self.get(thermal), thermal)
            if "Power" in chassis:
                power = _link(chassis["Power"], "Power", path)
                power_sensors, watts = parse_redfish_power(self.get(power), power)
                sensors += power_sensors
                if watts is not None:
                    consumed = (consumed or 0.0) + watts
        return BmcReading(sensors, consumed, chassis_on)

    def probe(self) -> None:
        self.get("/redfish/v1/")


def run_command(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=10, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout


class IpmiClient:
    """``ipmitool`` against the local BMC; the runner is injectable for tests."""

    def __init__(self, runner: CommandRunner = run_command):
        self.runner = runner

    def read(self) -> BmcReading:
        sensors = parse_sdr_elist(self.runner(["ipmitool", "sdr", "elist"]))
        try:
            dcmi = parse_dcmi_power(self.runner(["ipmitool", "dcmi", "power", "reading"]))
        except RuntimeError as exc:  # many BMCs lack DCMI; the SDR still tells watts
            log.info("dcmi power reading unavailable: %s", exc)
            dcmi = None
        chassis = parse_chassis_power(self.runner(["ipmitool", "chassis", "power", "status"]))
        return BmcReading(sensors, dcmi, chassis)

    def probe(self) -> None:
        self.runner(["ipmitool", "chassis", "power", "status"])


def client_from_settings(
    cfg: NodeConfig, roots: Roots, runner: CommandRunner | None = None
) -> tuple[RedfishClient | IpmiClient | None, str]:
    """The BMC client the node's settings ask for, or None with the reason there is none."""
    try:
        url = cfg.value("MAC_BMC_REDFISH_URL")
        if url:
            client = RedfishClient(
                url,
                cfg.value("MAC_BMC_REDFISH_USER") or "",
                cfg.value("MAC_BMC_REDFISH_PASSWORD") or "",
                verify_tls=cfg.value("MAC_BMC_REDFISH_VERIFY_TLS"),
            )
            return client, ""
    except ConfigError as exc:
        return None, f"no BMC: {exc}"
    if runner is not None:
        return IpmiClient(runner), ""
    if not roots.dev("ipmi0").exists():
        return None, (
            f"no BMC: MAC_BMC_REDFISH_URL is not set and {roots.dev('ipmi0')} is missing "
            "(load ipmi_devintf or configure Redfish)"
        )
    if shutil.which("ipmitool") is None:
        return None, "no BMC: ipmitool is not installed (apt install ipmitool)"
    return IpmiClient(), ""


# What a BMC that does not answer, or answers nonsense, raises: ipmi_up 0 with the reason.
BMC_ERRORS = (
    OSError,
    RuntimeError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    subprocess.SubprocessError,
)


class BmcSource:
    """ipmi_* families from the configured BMC; ipmi_up 0 with the reason when it fails."""

    name = "bmc"

    FAMILIES = {
        "temperature": ("ipmi_temperature_celsius", "Temperature reading in degree Celsius."),
        "fan": ("ipmi_fan_speed_rpm", "Fan speed in rotations per minute."),
        "voltage": ("ipmi_voltage_volts", "Voltage reading in Volts."),
        "power": ("ipmi_power_watts", "Power reading in Watts."),
        "current": ("ipmi_current_amperes", "Current reading in Amperes."),
    }

    def __init__(self, client: RedfishClient | IpmiClient | None, reason: str = ""):
        self.client = client
        self.protocol = (
            "redfish" if isinstance(client, RedfishClient) else "ipmi" if client else "none"
        )
        self._backend = BackendStatus("bmc", False, reason or "not scraped yet")
        self._checked_at = 0.0

    def backends(self) -> list[BackendStatus]:
        return [self._backend]

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "ipmi_up", "1 when the BMC answered this scrape.", labels=["collector"]
        )
        if self.client is None:
            up.add_metric([self.protocol], 0.0)
            yield up
            return
        try:
            reading = self.client.read()
            families = list(self._families(reading))  # a bad value fails here, not half-way
        except BMC_ERRORS as exc:
            self._set(False, self._reason(exc))
            up.add_metric([self.protocol], 0.0)
            yield up
            return
        self._set(True, "")
        up.add_metric([self.protocol], 1.0)
        yield up
        yield from families

    def _reason(self, exc: Exception) -> str:
        # TypeError/AttributeError: JSON of a shape the checks above did not foresee.
        if isinstance(exc, MalformedAnswer | TypeError | AttributeError):
            return f"{self.protocol}: malformed answer: {exc}"
        return f"{self.protocol}: {exc}"

    def _families(self, reading: BmcReading) -> Iterable[Metric]:
        values = {
            kind: GaugeMetricFamily(name, doc, labels=["id", "name"])
            for kind, (name, doc) in self.FAMILIES.items()
        }
        state = GaugeMetricFamily(
            "ipmi_sensor_state",
            "Sensor state: 0 nominal, 1 warning, 2 critical.",
            labels=["id", "name", "type"],
        )
        other = GaugeMetricFamily(
            "ipmi_sensor_value",
            "Reading of a sensor of another type.",
            labels=["id", "name", "type"],
        )
        for sensor in reading.sensors:
            if sensor.value is not None and sensor.type in values:
                values[sensor.type].add_metric([sensor.id, sensor.name], float(sensor.value))
            elif sensor.value is not None:
                other.add_metric([sensor.id, sensor.name, sensor.type], float(sensor.value))
            if sensor.state is not None:
                state.add_metric([sensor.id, sensor.name, sensor.type], sensor.state)
        yield from values.values()
        yield other
        yield state
        if reading.dcmi_watts is not None:
            yield GaugeMetricFamily(
                "ipmi_dcmi_power_consumption_watts",
                "Current power consumption in Watts.",
                value=reading.dcmi_watts,
            )
        if reading.chassis_on is not None:
            yield GaugeMetricFamily(
                "ipmi_chassis_power_state",
                "Current power state (1=on, 0=off).",
                value=reading.chassis_on,
            )

    def _set(self, ok: bool, reason: str) -> None:
        self._backend = BackendStatus("bmc", ok, reason)
        self._checked_at = time.monotonic()

    def health(self) -> dict:
        """For /health: whether the BMC answers (probed when the last answer is old)."""
        if self.client is not None and time.monotonic() - self._checked_at > HEALTH_CACHE_SECONDS:
            try:
                self.client.probe()
            except BMC_ERRORS as exc:
                self._set(False, self._reason(exc))
            else:
                self._set(True, "")
        return {
            "bmc": {
                "protocol": self.protocol,
                "answers": self._backend.available,
                "reason": self._backend.reason,
            }
        }


def build(options: Options, env: Mapping[str, str] | None = None) -> Exporter:
    client, reason = client_from_settings(node_config(options.roots, env), options.roots)
    source = BmcSource(client, reason)
    return Exporter("bmc-agent", [source], timeout=options.timeout, health_extra=source.health)
