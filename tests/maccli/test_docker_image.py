"""The image's build context holds every MAC package its code imports.

The context is built from a list; a package added to the tree but not to the image
(node/ once) makes every container fail at its first import. Here the context is
built for real and each first-party import in it is looked up.
"""

from __future__ import annotations

import ast
from pathlib import Path

from maccli.runtimes.dockerimage import build_context

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = {
    path.parent.name for path in REPO.glob("*/__init__.py") if path.parent.name != "tests"
}


def imported_packages(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found & FIRST_PARTY


def test_the_context_holds_every_package_its_code_imports(tmp_path):
    (tmp_path / "wheels").mkdir()
    context = build_context(REPO, tmp_path / "wheels", tmp_path / "context")
    shipped = {path.parent.name for path in context.glob("*/__init__.py")}
    assert {"node", "alerting", "maccli", "exporters", "macweb"} <= shipped
    missing = imported_packages(context) - shipped - {"testkit", "bench"}
    assert not missing, f"the image's code imports {sorted(missing)}, not in its context"
    assert not {"testkit", "tests", "bench"} & shipped
