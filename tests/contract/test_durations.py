"""One duration grammar, Prometheus's: what MAC accepts, Prometheus starts with.

valid_duration checks every duration MAC writes for Prometheus, Alertmanager or vmalert
(the Duration kind, MAC_ALERT_FOR, `prometheus_config --scrape-interval`). Prometheus
reads them with prometheus/common's model.ParseDuration: each unit at most once, the
largest first. The last tests hand both lists to the real promtool.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from contract.settings import SettingError, check
from contract.settings.kinds import Duration, duration_seconds, valid_duration
from contract.settings.readers import rule_durations

ACCEPTED = ["30s", "5m", "1h30m", "500ms", "1y2w3d4h5m6s7ms", "90s", "2d4h", "15d", "292y"]
REFUSED = [
    "30s5m",  # out of order
    "1m1m",  # a unit twice
    "5m30m",
    "1s500ms1s",
    "",
    "30",  # no unit
    "1.5s",  # no fraction
    "-5m",
    "5 m",
    " 5m",
    "5M",
    "\u0665s",  # a digit, but not an ASCII one
    "5m\n",
    "293y",  # past Go's time.Duration
]
ZERO = ["0", "0s", "0m0s", "0ms"]


@pytest.mark.parametrize("text", ACCEPTED)
def test_prometheus_durations_are_accepted(text):
    assert valid_duration(text) and valid_duration(text, zero=True)
    assert Duration().parse("MAC_SCRAPE_INTERVAL", text) == text


@pytest.mark.parametrize("text", REFUSED)
def test_what_prometheus_refuses_is_refused(text):
    assert not valid_duration(text) and not valid_duration(text, zero=True)
    with pytest.raises(ValueError, match="each unit once, largest first"):
        Duration().parse("MAC_SCRAPE_INTERVAL", text)
    if text.strip() == text:  # MAC_ALERT_FOR's items are stripped of spaces
        with pytest.raises(ValueError, match="MAC_ALERT_FOR"):
            rule_durations("MAC_ALERT_FOR", f"MacNodeOffline={text}")


@pytest.mark.parametrize("text", ZERO)
def test_zero_only_where_it_means_something(text):
    assert not valid_duration(text)
    assert valid_duration(text, zero=True)
    with pytest.raises(ValueError, match="above zero"):
        Duration().parse("MAC_ALERT_GROUP_INTERVAL", text)
    assert Duration(zero=True).parse("MAC_ALERT_GROUP_WAIT", text) == text
    assert rule_durations("MAC_ALERT_FOR", f"GpuXidError={text}")


def test_the_settings_apply_it():
    with pytest.raises(SettingError, match="MAC_SCRAPE_INTERVAL='30s5m' is not a duration"):
        check("MAC_SCRAPE_INTERVAL", "30s5m")
    with pytest.raises(SettingError, match="MAC_ALERT_FOR"):
        check("MAC_ALERT_FOR", "MacNodeOffline=1m1m")
    with pytest.raises(SettingError, match="above zero"):
        check("MAC_ALERT_REPEAT_INTERVAL", "0s")
    check("MAC_ALERT_GROUP_WAIT", "0s")
    check("MAC_ALERT_NODE_GROUP_WAIT", "0s")


@pytest.mark.parametrize("text", ["1d", "2w", "1y", "1d12h", "3w2d"])
def test_a_docker_duration_has_no_days_weeks_or_years(text):
    """Docker and Compose read a health check's interval with Go's time.ParseDuration (h m s
    ms): `1d` would stop `mac start master` at Compose, so the setting refuses it first."""
    assert Duration().parse("MAC_SCRAPE_INTERVAL", text) == text
    with pytest.raises(ValueError, match="write 1d as 24h"):
        Duration(docker=True).parse("MAC_HEALTHCHECK_INTERVAL", text)
    with pytest.raises(SettingError, match="MAC_HEALTHCHECK_INTERVAL='1d' has a unit Docker"):
        check("MAC_HEALTHCHECK_INTERVAL", "1d")


def test_compose_reads_every_docker_duration_the_setting_takes():
    """docker-compose 1.29's own parser (Debian's python3-compose), where it is installed."""
    compose = "/usr/bin/python3"
    probe = "import compose.timeparse"
    if subprocess.run([compose, "-c", probe], capture_output=True, check=False).returncode:
        pytest.skip("docker-compose (python3-compose) is not installed")
    texts = [t for t in ACCEPTED if _takes_docker(t)] + ["1d", "2w", "1y"]
    script = (
        "import sys, compose.timeparse as t; "
        "print(' '.join(str(t.timeparse(a) is not None) for a in sys.argv[1:]))"
    )
    out = subprocess.run([compose, "-c", script, *texts], capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    assert dict(zip(texts, out, strict=True)) == {t: str(_takes_docker(t)) for t in texts}


def _takes_docker(text: str) -> bool:
    try:
        Duration(docker=True).parse("MAC_HEALTHCHECK_INTERVAL", text)
    except ValueError:
        return False
    return True


def test_seconds_are_read_from_the_same_grammar():
    assert duration_seconds("1y2w3d4h5m6s7ms") == (
        365 * 86400 + 2 * 7 * 86400 + 3 * 86400 + 4 * 3600 + 5 * 60 + 6 + 0.007
    )
    assert duration_seconds("0") == 0


def _promtool_rules(tmp_path: Path, durations: list[str]) -> dict[str, bool]:
    """{duration: whether `promtool check rules` accepts it as a rule's `for:`}, one file
    each, in one run."""
    files = {}
    for index, text in enumerate(durations):
        rule = {"alert": "MacTest", "expr": "up == 0", "for": text}
        path = tmp_path / f"rules-{index}.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [rule]}]}))
        files[str(path)] = text
    run = subprocess.run(
        ["promtool", "check", "rules", *files], capture_output=True, text=True, check=False
    )
    verdicts = {}
    for block in run.stdout.split("Checking ")[1:]:
        name, _, rest = block.partition("\n")
        verdicts[files[name.strip()]] = "SUCCESS" in rest
    assert len(verdicts) == len(durations), run.stdout + run.stderr
    return verdicts


def _promtool_config(tmp_path: Path, interval: str) -> bool:
    """Whether `promtool check config` takes `interval` as the scrape and evaluation
    interval, as scraping.promconfig writes them."""
    path = tmp_path / "prometheus.yml"
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval}}
    path.write_text(yaml.safe_dump(config))
    run = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    return run.returncode == 0


promtool = pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool (Debian's prometheus package) is not installed"
)


@promtool
def test_promtool_agrees_on_every_rule_duration(tmp_path):
    # YAML cannot carry every refused string as it is (a bare newline); those that it can:
    written = [text for text in REFUSED if text.strip() == text and text]
    verdicts = _promtool_rules(tmp_path, ACCEPTED + ZERO + written)
    assert {text: verdicts[text] for text in ACCEPTED + ZERO} == dict.fromkeys(
        ACCEPTED + ZERO, True
    )
    assert {text: verdicts[text] for text in written} == dict.fromkeys(written, False)


@promtool
@pytest.mark.parametrize("text", ["30s", "1m30s", "500ms", "30s5m", "1m1m"])
def test_promtool_agrees_on_the_scrape_interval(tmp_path, text):
    assert _promtool_config(tmp_path, text) == valid_duration(text)
