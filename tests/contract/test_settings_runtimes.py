"""The runtime each setting is declared for is the runtime it works under.

Under Docker a master's service sees only what the Compose file names: a setting its
settings read and that the declaration says works under both runtimes must reach the
container (named without a value, or as ${NAME}, or written into the file from the
setting's own value at each start: maccli.master.compose.FROM_SETTINGS), and one the
Compose file pins to a value cannot be said to work under Docker. The docs' tables show
the declaration's word.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from contract.settings import CATALOG, Applies, SetWith
from maccli.master.compose import FROM_SETTINGS

REPO = Path(__file__).resolve().parents[2]
DJANGO_READ = re.compile(r"(?:setting|text)\(\"([A-Z][A-Z0-9_]+)\"\)")


def _environment(service: str) -> dict[str, object]:
    compose = yaml.safe_load((REPO / "docker" / "docker-compose.master.yml").read_text())
    return compose["services"][service]["environment"] or {}


def _passed(environment: dict[str, object]) -> set[str]:
    """Names the container takes from `mac`: no value, or a value that is ${NAME...}."""
    return {
        name
        for name, value in environment.items()
        if value is None
        or re.fullmatch(rf"\$\{{{name}(:-[^}}]*)?\}}", str(value))
        or name in FROM_SETTINGS
    }


def _read_by_the_master_s_settings() -> set[str]:
    text = (REPO / "macweb" / "settings.py").read_text()
    return set(DJANGO_READ.findall(text)) - {"MAC_TEST_DB_NAME"}


def test_a_setting_declared_for_both_runtimes_reaches_the_master_s_containers():
    read = _read_by_the_master_s_settings()
    assert len(read) > 80, "the settings' reader changed: update DJANGO_READ"
    passed = _passed(_environment("api-server")) | _passed(_environment("proxy"))
    missing = sorted(
        name for name in read if CATALOG[name].applies is Applies.BOTH and name not in passed
    )
    assert not missing, f"declared for both runtimes but not passed under Docker: {missing}"


def test_a_setting_the_compose_file_pins_is_declared_for_the_process_runtime_only():
    for service in ("api-server", "proxy"):
        environment = _environment(service)
        pinned = set(environment) - _passed(environment)
        for name in pinned & set(CATALOG):
            if CATALOG[name].set_with is SetWith.MAC:
                continue  # mac's own word to its services
            assert CATALOG[name].applies is Applies.PROCESS, f"{service} pins {name}"


def test_the_settings_docker_ignores_are_the_folders_and_addresses_compose_pins():
    process_only = {name for name, item in CATALOG.items() if item.applies is Applies.PROCESS}
    assert {"MAC_DATA_DIR", "MAC_SD_DIR", "MAC_REDIS_URL", "MAC_PROMETHEUS_URL"} <= process_only
    # Issue 34's others work under Docker now: mac-prometheus loads what MAC writes from
    # them, and a site's Alertmanager replaces mac-alertmanager.
    working = {"MAC_ALERTMANAGER_URL", "MAC_ALERT_FOR", "MAC_RUNBOOK_BASE_URL"}
    assert not (working | {"MAC_SCRAPE_INTERVAL"}) & process_only
