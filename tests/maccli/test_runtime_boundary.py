"""What depends on the runtime stays behind maccli.runtimes' Runtime: no command asks
which runtime it has, and nothing reaches Compose through mac's own environment."""

from __future__ import annotations

import re
from pathlib import Path

MACCLI = Path(__file__).resolve().parents[2] / "maccli"
RUNTIMES = MACCLI / "runtimes"
# A runtime's type asked, by class or by name.
TYPE_CHECK = re.compile(
    r"isinstance\([^)]*Runtime\b|\b(?:Docker|Process)Runtime\b|\.name\s*[!=]=\s*[\"'](?:docker|process)"
)
# mac's environment changed: Compose (or any child) would take values from it unseen.
ENVIRON_WRITE = re.compile(
    r"os\.environ(?:\[[^\]]+\]\s*=(?!=)|\.(?:update|setdefault|pop)\()|putenv"
)


def _hits(pattern: re.Pattern[str], *, outside: Path | None = None) -> list[str]:
    found = []
    for path in sorted(MACCLI.rglob("*.py")):
        if outside is not None and outside in path.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(MACCLI.parent)}:{number}: {line.strip()}")
    return found


def test_no_check_of_a_runtime_s_type_outside_the_runtimes():
    assert _hits(TYPE_CHECK, outside=RUNTIMES) == []


def test_the_patterns_find_what_they_look_for():
    # The grep above proves something only if it would have found the old code.
    assert TYPE_CHECK.search("if isinstance(runtime, DockerRuntime):")
    assert TYPE_CHECK.search("from maccli.runtimes.process import ProcessRuntime")
    assert TYPE_CHECK.search('elif runtime.name == "docker":')
    assert ENVIRON_WRITE.search('os.environ["MAC_PUBLIC_URL"] = public_url(cfg)')
    assert ENVIRON_WRITE.search("os.environ.update(scaleout.store_keys(work))")
    assert ENVIRON_WRITE.search("os.environ.setdefault(key, value)")
    assert not ENVIRON_WRITE.search('if os.environ["X"] == "1":')


def test_mac_never_changes_its_own_environment_to_reach_compose():
    assert _hits(ENVIRON_WRITE) == []
