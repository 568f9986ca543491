"""The image's build context holds every MAC package its code imports, and `--save`
writes a whole image or none.

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


def _saving(monkeypatch, tmp_path: Path, docker: Path) -> list[dict]:
    """scripts/docker-images over the stand-in docker (tests/maccli/fake_docker.py), the
    build itself skipped; the options each subprocess.run got."""
    import subprocess

    from maccli.runtimes import dockerimage

    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_DOCKER_STATE", str(docker))
    monkeypatch.setattr(dockerimage, "build_image", lambda *args, **kw: "mac-base:bookworm")
    seen: list[dict] = []
    real = subprocess.run

    def run(argv, **options):
        seen.append({"argv": argv, **options})
        return real(argv, **options)

    monkeypatch.setattr(subprocess, "run", run)
    return seen


def test_save_has_no_time_limit_and_renames_the_file_when_complete(docker, monkeypatch, tmp_path):
    from maccli.runtimes.dockerimage import main

    seen = _saving(monkeypatch, tmp_path, docker)
    target = tmp_path / "out" / "mac-images.tar"
    target.parent.mkdir()

    assert main(["--save", str(target)]) == 0

    (save,) = [call for call in seen if call["argv"][:2] == ["docker", "save"]]
    assert save.get("timeout") is None  # minutes to write a large image are fine
    assert save["argv"] == ["docker", "save", "-o", f"{target}.tmp", "mac:latest"]
    assert target.read_text() == "tar of mac:latest"
    assert [path.name for path in target.parent.iterdir()] == ["mac-images.tar"]


def test_a_failed_save_leaves_no_file_and_says_docker_s_reason(
    docker, monkeypatch, tmp_path, capsys
):
    from maccli.runtimes.dockerimage import main

    _saving(monkeypatch, tmp_path, docker)
    (docker / "save-fails").write_text("")
    target = tmp_path / "out" / "mac-images.tar"
    target.parent.mkdir()

    assert main(["--save", str(target)]) == 1

    assert list(target.parent.iterdir()) == []  # neither the file nor its half
    said = capsys.readouterr().err
    assert f"Error: docker save -o {target} mac:latest failed: write /x: no space left" in said
