"""mac:latest, built the documented way, keeps no wheel in any layer: the wheelhouse of
the build context stays in the Dockerfile's build stage (docker/Dockerfile)."""

from __future__ import annotations

import subprocess
import tarfile

import pytest

from testkit.docker_engine import docker_cli

pytestmark = [pytest.mark.docker, pytest.mark.netns, pytest.mark.slow]


def _layer_paths(engine, image: str) -> list[str]:
    """Every path of every layer of `image`, read from `docker save` as it streams."""
    save = subprocess.Popen([docker_cli(), "save", image], stdout=subprocess.PIPE, env=engine.env())
    found = []
    with tarfile.open(fileobj=save.stdout, mode="r|") as outer:
        for member in outer:
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=outer.extractfile(member), mode="r|") as layer:
                    found += [entry.name for entry in layer]
    assert save.wait(timeout=600) == 0
    return found


def test_no_layer_of_the_image_holds_the_wheelhouse(engine, images):
    paths = [path.removeprefix("./") for path in _layer_paths(engine, images)]
    assert any(path.startswith("opt/mac/venv/") for path in paths)
    # (Debian's python3-venv brings pip's and setuptools' own, in /usr/share/python-wheels.)
    wheels = [path for path in paths if path.startswith("opt/mac/") and "wheelhouse" in path]
    wheels += [path for path in paths if path.startswith("opt/mac/") and path.endswith(".whl")]
    assert not wheels, wheels[:5]
    # It still runs as before.
    done = engine.docker("run", "--rm", images, "--help")
    assert done.returncode == 0, done.stderr
