"""The declaration of every setting: each entry complete, each kind strict, each error
naming the setting and what to give, each derived default worked out one way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract.drainpolicy import DrainBudget, DrainMode
from contract.settings import (
    CATALOG,
    SECRETS,
    Applies,
    Derived,
    HttpMode,
    SettingError,
    SetWith,
    Side,
    check,
    duration_seconds,
    problems,
    setting,
    values,
)
from contract.settings.kinds import Duration, Integer, ListOf, Network, Number, Url

REPO = Path(__file__).resolve().parents[2]


def _read(name: str, text: str | None):
    return values({name: text}.get)[name] if text is not None else values({}.get)[name]


def test_every_entry_says_what_it_is_who_reads_it_and_where_it_is_set():
    assert len(CATALOG) > 180
    for name, item in CATALOG.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]+", name), name
        assert item.meaning and "\n" not in item.meaning and len(item.meaning) < 300, name
        assert item.side in Side and item.applies in Applies and item.set_with in SetWith
        assert item.group, name
        assert item.kind.describe(), name
        assert item.default_text(), name


def test_each_concrete_default_is_a_value_its_kind_accepts():
    """The default shown in the docs, read back, is the default the code uses."""
    for name, item in CATALOG.items():
        if item.default is None or isinstance(item.default, Derived) or item.default == []:
            continue
        assert item.kind.parse(name, item.kind.show(item.default)) == item.default, name


def test_every_docs_link_leads_to_a_file_and_heading_that_exist():
    for name, item in CATALOG.items():
        if not item.see:
            continue
        path, _, anchor = item.see.partition("#")
        page = REPO / path
        assert page.is_file(), f"{name}: {path}"
        if anchor:
            slugs = {
                re.sub(r"[^a-z0-9_ -]", "", heading.strip().lower()).replace(" ", "-")
                for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
            }
            assert anchor in slugs, f"{name}: {item.see}"


def test_unset_or_empty_gives_the_default_and_a_list_is_a_fresh_copy():
    assert _read("MAC_PROBE_INTERVAL", None) == 30.0
    assert _read("MAC_PROBE_INTERVAL", "  ") == 30.0
    first = _read("MAC_NODE_NETWORKS", None)
    first.append("x")
    assert _read("MAC_NODE_NETWORKS", None) == []


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("MAC_SCRAPE_SHARDS", "65", "MAC_SCRAPE_SHARDS='65' is out of range: use a whole number "
         "from 0 to 64."),
        ("MAC_SCRAPE_SHARDS", "two", "MAC_SCRAPE_SHARDS='two' is not a whole number: use a whole "
         "number from 0 to 64."),
        ("MAC_PROBE_INTERVAL", "nan", "MAC_PROBE_INTERVAL='nan' is out of range: use a number of "
         "seconds from 0.5 to 3600."),
        ("MAC_HTTP", "maybe", "MAC_HTTP='maybe' is not an HTTP mode: use on (machines' endpoints;"),
        ("MAC_DEBUG", "sure", "MAC_DEBUG='sure' is not on or off: use 1 or 0"),
        ("MAC_ALERT_GROUP_WAIT", "30 seconds", "MAC_ALERT_GROUP_WAIT='30 seconds' is not a "
         "duration: write it as Prometheus does"),
        ("MAC_SMTP_PORT", "0", "MAC_SMTP_PORT='0' is not a TCP port: use a port from 1 to 65535."),
        ("MAC_REDIS_URL", "http://r:6379", "MAC_REDIS_URL='http://r:6379' is not a usable URL: "
         "give redis:// or rediss:// or unix://"),
        ("MAC_TRUSTED_PROXIES", "10.0.0.0/8,proxy", "MAC_TRUSTED_PROXIES='proxy' is not a network"),
        # Every address trusted: any client would choose its own.
        ("MAC_TRUSTED_PROXIES", "10.1.2.3, 0.0.0.0/0", "MAC_TRUSTED_PROXIES='0.0.0.0/0' holds "
         "every address: name only the addresses or networks the trusted machines are in"),
        ("MAC_TRUSTED_PROXIES", "::/0", "MAC_TRUSTED_PROXIES='::/0' holds every address"),
        ("MAC_REGISTER_RATE", "600", "MAC_REGISTER_RATE='600' is not a rate: use <count>/<period>"),
        ("MAC_ALERT_FOR", "MacNodeOffline:3m", "MAC_ALERT_FOR='MacNodeOffline:3m' has "
         "'MacNodeOffline:3m': write RULE=DURATION pairs"),
        ("MAC_LOG_LEVEL", "loud", "MAC_LOG_LEVEL='loud' is not a log level: use DEBUG, INFO,"),
        ("MAC_SLURM_DRAIN", "yes", "MAC_SLURM_DRAIN='yes': use off (the default), dry-run"),
        ("MAC_DRAIN_BUDGET", "0%", "MAC_DRAIN_BUDGET='0%': give a share of the fleet"),
        ("MAC_MASTER_CA_SHA256", "abc", "MAC_MASTER_CA_SHA256='abc' is not a CA pin"),
        ("MAC_AGENT_NETWORK", "Host", "MAC_AGENT_NETWORK='Host' is not a network mode: use host"),
        ("NODE_NAME", "gpu_01", "NODE_NAME='gpu_01' is not a valid host name"),
        ("MAC_SCRAPER_BUFFER_BYTES", "2 GB", "MAC_SCRAPER_BUFFER_BYTES='2 GB' is not a size"),
        ("MAC_ALERT_EMAIL_TO", "ops", "MAC_ALERT_EMAIL_TO='ops' is not valid: give an email"),
        # MAC's Alertmanager client sends no user:password; the refusal never shows it
        ("MAC_ALERTMANAGER_URL", "https://ops:s3cret@am.example:9093",
         "MAC_ALERTMANAGER_URL='https://am.example:9093' (its user:password left out here) "
         "carries credentials"),
    ],
)  # fmt: skip
def test_a_bad_value_names_the_setting_and_what_to_give(name, text, message):
    with pytest.raises(SettingError) as caught:
        _read(name, text)
    assert str(caught.value).startswith(message)
    with pytest.raises(SettingError):
        check(name, text)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("MAC_HTTP", "Redirect", HttpMode.REDIRECT),
        ("MAC_DEBUG", "Yes", True),
        ("MAC_SMTP_TLS", "off", False),
        ("MAC_LOG_LEVEL", "warning", "WARNING"),
        ("MAC_SLURM_DRAIN", "dry-run", DrainMode.DRY_RUN),
        ("MAC_DRAIN_BUDGET", "3", DrainBudget(count=3)),
        ("MAC_NODE_NETWORKS", "10.0.0.0/8, fd00::/8", [Network().parse("x", "10.0.0.0/8"),
                                                      Network().parse("x", "fd00::/8")]),
        ("MAC_TLS_NAMES", "a.example.org,,b", ["a.example.org", "b"]),
        ("MAC_ALERTMANAGER_URL", "http://am:9093/", "http://am:9093"),
        ("MAC_LABELS", "rack=a1, role = gpu", {"rack": "a1", "role": "gpu"}),
        ("MAC_DATA_DIR", "~/mac", Path("~/mac").expanduser()),
        ("MAC_PORT_OFFSET", "-1000", -1000),
    ],
)  # fmt: skip
def test_a_good_value_reads_as_its_kind(name, text, value):
    assert _read(name, text) == value


def test_derived_defaults_are_worked_out_from_the_other_settings_one_way():
    read = values(
        {
            "MAC_DATA_DIR": "/srv/mac",
            "MAC_PROMETHEUS_PORT": "39090",
            "MAC_ALERTMANAGER_PORT": "39093",
            "MAC_PROBE_INTERVAL": "2.5",
            "MAC_REDIS_URL": "redis://r:6379/3",
            "MAC_PORT_OFFSET": "1000",
        }.get
    )
    assert read["MAC_TLS_DIR"] == Path("/srv/mac/tls")
    assert read["MAC_SD_DIR"] == Path("/srv/mac/prometheus/targets")
    assert read["MAC_ALERTMANAGER_DIR"] == Path("/srv/mac/alertmanager")
    assert read["MAC_STATIC_ROOT"] == Path("/srv/mac/static")
    assert read["MAC_PROMETHEUS_URL"] == "http://127.0.0.1:39090"
    assert read["MAC_TARGETS_URL"] == "http://127.0.0.1:39090"
    assert read["MAC_ALERTMANAGER_URL"] == "http://127.0.0.1:39093"
    assert read["MAC_ALERT_NODE_GROUP_INTERVAL"] == "3s"
    assert read["MAC_CELERY_BROKER_URL"] == "redis://r:6379/3"
    assert read["MAC_SYS_EXPORTER_PORT"] == 30101
    # What is given wins over what would be worked out; a default left to the code is None.
    assert values({"MAC_TLS_DIR": "/etc/mac-tls"}.get)["MAC_TLS_DIR"] == Path("/etc/mac-tls")
    assert values({}.get)["MAC_TLS_PORT"] is None
    assert values({"MAC_PROBE_INTERVAL": "60"}.get)["MAC_ALERT_NODE_GROUP_INTERVAL"] == "5s"


def test_the_data_folder_defaults_to_the_checkout_s_var_for_both_sides():
    assert setting("MAC_DATA_DIR").default == REPO / "var"
    assert values({}.get)["MAC_TLS_DIR"] == REPO / "var" / "tls"


def test_secrets_are_the_declared_ones_and_masked_by_their_kind():
    assert {
        "MAC_JOIN_TOKEN",
        "MAC_NODE_KEY",
        "MAC_BMC_REDFISH_PASSWORD",
        "MAC_SMTP_PASSWORD",
        "MAC_METRICS_TOKEN",
        "SECRET_KEY",
    } <= SECRETS
    assert "MASTER_IP" not in SECRETS


def test_an_undeclared_name_is_a_programming_error_that_names_it():
    with pytest.raises(KeyError, match=r"MAC_NOT_DECLARED is not declared in contract\.settings"):
        values({}.get)["MAC_NOT_DECLARED"]


def test_problems_lists_every_bad_setting_of_a_side_before_anything_starts():
    found = problems(
        {"MAC_SCRAPE_SHARDS": "99", "MAC_HTTP": "x", "MAC_BIND": "nowhere"}.get, (Side.MASTER,)
    )
    assert [text.split("=")[0] for text in found] == ["MAC_HTTP", "MAC_SCRAPE_SHARDS"]
    assert problems({}.get, tuple(Side)) == []


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (Integer(0, 64), "whole number from 0 to 64"),
        (Integer(1024, None, "bytes"), "whole number of bytes, at least 1024"),
        (Number(0.5, 3600), "seconds from 0.5 to 3600"),
        (Duration(), "duration (30s, 5m, 1h)"),
        (ListOf(Network()), "comma-separated networks"),
        (Url(("redis", "rediss")), "URL (redis://, rediss://)"),
    ],
)
def test_each_kind_describes_itself_for_the_docs(kind, words):
    assert kind.describe() == words


def test_durations_read_as_seconds():
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("500ms") == 0.5
    assert duration_seconds(_read("MAC_METRICS_RETENTION", None)) == 15 * 86400
