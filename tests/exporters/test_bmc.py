"""bmc-agent: ipmitool and Redfish parsers, and a real HTTP server as the fake BMC."""

from __future__ import annotations

import base64
import json

import pytest

from exporters.bmc import (
    BmcSource,
    IpmiClient,
    RedfishClient,
    client_from_settings,
    parse_chassis_power,
    parse_dcmi_power,
    parse_redfish_power,
    parse_redfish_thermal,
    parse_sdr_elist,
)
from exporters.runtime import Exporter
from node.config import NodeConfig
from node.host import Roots
from testkit.fakehttp import JsonHandler, serving
from tests.exporters.conftest import FIXTURES, assert_golden, fixture_roots_args, scrape_text

IPMI = FIXTURES / "ipmitool"
REDFISH = FIXTURES / "redfish"
COMMANDS = {
    ("ipmitool", "sdr", "elist"): IPMI / "sdr_elist.txt",
    ("ipmitool", "dcmi", "power", "reading"): IPMI / "dcmi_power_reading.txt",
    ("ipmitool", "chassis", "power", "status"): IPMI / "chassis_power_status.txt",
}
USER, PASSWORD = "root", "calvin"


def recorded_ipmitool(args: list[str]) -> str:
    return COMMANDS[tuple(args)].read_text()


class FakeBmc(JsonHandler):
    """Serves recorded Redfish JSON (tests/fixtures/redfish/<path>/index.json) with basic auth."""

    def do_GET(self):
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            self.send_error(401, "Unauthorized")
            return
        path = REDFISH / self.path.strip("/") / "index.json"
        if not path.resolve().is_relative_to(REDFISH.resolve()) or not path.exists():
            self.send_error(404)
            return
        self.send_json(200, path.read_bytes())


@pytest.fixture
def fake_bmc():
    with serving(FakeBmc) as url:
        yield url


def test_parse_sdr_elist_types_values_and_states():
    sensors = {s.name + s.id: s for s in parse_sdr_elist((IPMI / "sdr_elist.txt").read_text())}
    inlet = sensors["Inlet Temp4"]
    assert (inlet.type, inlet.value, inlet.state) == ("temperature", 23.0, 0.0)
    assert sensors["Fan3A52"].state == 1.0  # "nc": non-critical
    assert sensors["Fan3B53"].value is None and sensors["Fan3B53"].state is None  # no reading
    assert sensors["Voltage 1108"].type == "voltage"
    assert sensors["PS2 Status99"].state == 2.0  # critical PSU
    assert sensors["Current 1106"].value == 0.8


def test_parse_dcmi_and_chassis_power():
    assert parse_dcmi_power((IPMI / "dcmi_power_reading.txt").read_text()) == 378.0
    assert parse_dcmi_power("DCMI request failed because: Invalid command") is None
    assert parse_chassis_power("Chassis Power is on\n") == 1.0
    assert parse_chassis_power("Chassis Power is off\n") == 0.0


def test_parse_redfish_thermal_and_power():
    chassis = REDFISH / "redfish/v1/Chassis/System.Embedded.1"
    thermal = parse_redfish_thermal(json.loads((chassis / "Thermal/index.json").read_text()))
    names = {s.name: s for s in thermal}
    assert names["CPU2 Temp"].value == 64
    assert names["System Board Fan2A"].state == 1.0
    assert "System Board Fan2B" not in names  # absent fan
    power, watts = parse_redfish_power(json.loads((chassis / "Power/index.json").read_text()))
    assert watts == 4218
    psus = {s.name: s for s in power if s.type == "power_supply"}
    assert psus["PS2 Status"].state == 2.0


def test_ipmi_golden_output():
    exporter = Exporter("bmc-agent", [BmcSource(IpmiClient(recorded_ipmitool))])
    assert_golden("bmc-agent-ipmi", scrape_text(exporter.registry))


def test_redfish_golden_output_from_a_real_http_bmc(fake_bmc):
    source = BmcSource(RedfishClient(fake_bmc, USER, PASSWORD))
    registry = Exporter("bmc-agent", [source]).registry
    text = scrape_text(registry)
    assert registry.get_sample_value("ipmi_up", {"collector": "redfish"}) == 1
    assert registry.get_sample_value("ipmi_chassis_power_state") == 1
    assert_golden("bmc-agent-redfish", text)


def test_wrong_credentials_are_ipmi_up_0_with_the_reason(fake_bmc):
    source = BmcSource(RedfishClient(fake_bmc, USER, "wrong"))
    registry = Exporter("bmc-agent", [source]).registry
    assert registry.get_sample_value("ipmi_up", {"collector": "redfish"}) == 0
    assert "401" in source.backends()[0].reason
    assert source.health()["bmc"]["answers"] is False


def test_bmc_agent_process_reports_whether_the_bmc_answers(fake_bmc, start_exporter):
    env = {
        "MAC_BMC_REDFISH_URL": fake_bmc,
        "MAC_BMC_REDFISH_USER": USER,
        "MAC_BMC_REDFISH_PASSWORD": PASSWORD,
    }
    agent = start_exporter("bmc-agent", *fixture_roots_args(), env=env)
    health = agent.json("/health")
    assert health["bmc"] == {"protocol": "redfish", "answers": True, "reason": ""}
    status, metrics, _ = agent.get("/metrics")
    assert status == 200
    assert 'ipmi_temperature_celsius{id="iDRAC.Embedded.1#CPU1Temp",name="CPU1 Temp"} 61.0' in (
        metrics
    )


def test_bmc_agent_without_any_bmc_keeps_serving(start_exporter, tmp_path):
    agent = start_exporter(
        "bmc-agent", "--dev-root", str(tmp_path), env={"MAC_BMC_REDFISH_URL": ""}
    )
    assert agent.json("/health")["bmc"]["answers"] is False
    status, metrics, _ = agent.get("/metrics")
    assert status == 200
    assert 'ipmi_up{collector="none"} 0.0' in metrics
    assert f'reason="no BMC: MAC_BMC_REDFISH_URL is not set and {tmp_path}/ipmi0 is missing' in (
        metrics
    )


def test_the_redfish_settings_are_read_from_the_root_only_per_node_file(
    fake_bmc, start_exporter, tmp_path
):
    """Where `sudo mac env set --node MAC_BMC_REDFISH_...` puts them: the password never
    travels in the service's environment."""
    node_file = tmp_path / "env"
    node_file.write_text(
        f"MAC_BMC_REDFISH_URL={fake_bmc}\n"
        f"MAC_BMC_REDFISH_USER={USER}\n"
        f"MAC_BMC_REDFISH_PASSWORD={PASSWORD}\n"
    )
    agent = start_exporter(
        "bmc-agent", *fixture_roots_args(), env={"MAC_NODE_ENV_FILE": str(node_file)}
    )
    assert agent.json("/health")["bmc"] == {"protocol": "redfish", "answers": True, "reason": ""}


def test_a_bad_redfish_setting_is_ipmi_up_0_naming_it_not_a_crash(tmp_path):
    cfg = NodeConfig.load(
        {
            "MAC_NODE_ENV_FILE": str(tmp_path / "n"),
            "MAC_USER_ENV_FILE": str(tmp_path / "u"),
            "MAC_BMC_REDFISH_URL": "bmc.example.org",
            "MAC_BMC_REDFISH_VERIFY_TLS": "1",
        }
    )
    client, reason = client_from_settings(cfg, Roots(dev_root=str(tmp_path)))
    assert client is None
    assert reason.startswith("no BMC: MAC_BMC_REDFISH_URL='bmc.example.org' is not a usable URL")
    registry = Exporter("bmc-agent", [BmcSource(client, reason)]).registry
    assert registry.get_sample_value("ipmi_up", {"collector": "none"}) == 0


# --- a BMC whose Redfish answers are not what Redfish says ------------------------------

CHASSIS = "/redfish/v1/Chassis"
SYSTEM = f"{CHASSIS}/System.Embedded.1"


def malformed_bmc(answers: dict[str, object]) -> type[FakeBmc]:
    """The recorded BMC, with ``answers`` (path -> JSON) served in place of its own."""

    class MalformedBmc(FakeBmc):
        def do_GET(self):
            if self.path in answers:
                self.send_json(200, answers[self.path])
            else:
                super().do_GET()

    return MalformedBmc


def recorded(path: str) -> dict:
    return json.loads((REDFISH / path.strip("/") / "index.json").read_text())


MALFORMED = {
    "members-null": ({CHASSIS: {"Members": None}}, "Members"),
    "collection-a-list": ({CHASSIS: [{"@odata.id": SYSTEM}]}, "not a JSON object"),
    "member-a-string": ({CHASSIS: {"Members": [SYSTEM]}}, "Members"),
    "link-a-list": ({SYSTEM: {**recorded(SYSTEM), "Thermal": [f"{SYSTEM}/Thermal"]}}, "Thermal"),
    "reading-a-word": (
        {f"{SYSTEM}/Thermal": {"Temperatures": [{"Name": "CPU1 Temp", "ReadingCelsius": "hot"}]}},
        "ReadingCelsius",
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_redfish_answer_is_the_bmc_unavailable_with_the_reason(case):
    answers, named = MALFORMED[case]
    with serving(malformed_bmc(answers)) as url:
        source = BmcSource(RedfishClient(url, USER, PASSWORD))
        exporter = Exporter("bmc-agent", [source])
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in exporter.registry.collect()
            for sample in family.samples
        }
        health = source.health()["bmc"]
    assert samples[("ipmi_up", (("collector", "redfish"),))] == 0
    collector_ok = samples[("mac_exporter_collector_success", (("collector", "bmc"),))]
    assert collector_ok == 1  # the source answered: the BMC did not
    backend = source.backends()[0]
    assert backend.available is False
    assert backend.reason.startswith("redfish: malformed answer") and named in backend.reason
    assert health["answers"] is False and health["reason"] == backend.reason
    assert not any(name.startswith("ipmi_temperature") for name, _ in samples)


def test_a_malformed_service_root_is_a_bmc_that_does_not_answer_in_health():
    # /health probes /redfish/v1/ when no scrape has told lately.
    with serving(malformed_bmc({"/redfish/v1/": ["not", "an", "object"]})) as url:
        health = BmcSource(RedfishClient(url, USER, PASSWORD)).health()["bmc"]
    assert health["answers"] is False
    assert health["reason"].startswith("redfish: malformed answer")
    assert "not a JSON object" in health["reason"]
