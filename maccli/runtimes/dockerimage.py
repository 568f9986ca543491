"""MAC's Docker image, built offline: a wheelhouse from the host, then `docker build`.

Air-gapped clusters and sites behind TLS-inspecting proxies cannot `pip install` inside
a build, and many have no registry. So the host builds the wheels (`pip wheel`, once;
reused afterwards), the build context is the source plus that wheelhouse, and the base
image is a build argument: python:3.11-slim where a registry answers, the Debian base
made by `scripts/docker-base` (mac-base:bookworm) where none does; the latter is
preferred whenever it is present. `scripts/docker-images` and the docker runtime (when
the image is missing) both build through `build_image`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from node.runner import Runner, run_command

DEFAULT_IMAGE = "mac:latest"
DEBIAN_BASE = "mac-base:bookworm"
REGISTRY_BASE = "python:3.11-slim"
# What the image needs of the checkout besides MAC's packages; nothing else (no .venv,
# no var/) is sent to dockerd.
FILES = (
    "pyproject.toml", "README.md", "manage.py", "templates", "docker/Dockerfile",
    "docker/debian-packages.txt",
)  # fmt: skip
IMAGE_PYTHON = (3, 11)  # the base images' Python; binary wheels must match it
# The oldest 3.11 of a base (Debian bookworm's): dependencies behind markers such as
# python_full_version < "3.11.3" (async-timeout, for redis) must be in the wheelhouse too.
OLDEST_PYTHON = "3.11.2"


class ImageError(RuntimeError):
    """The image cannot be built; the message says why and what to run."""


def source_root(compose_dir: Path) -> Path | None:
    """The checkout the compose files come from, when it holds the source."""
    root = compose_dir.resolve().parent
    return root if (root / "pyproject.toml").is_file() and (root / "contract").is_dir() else None


def image_exists(image: str, run: Runner = run_command) -> bool:
    return run(["docker", "image", "inspect", "--format", "{{.Id}}", image]).returncode == 0


def choose_base(run: Runner = run_command) -> str:
    explicit = os.environ.get("MAC_BASE_IMAGE", "").strip()
    if explicit:
        return explicit
    return DEBIAN_BASE if image_exists(DEBIAN_BASE, run) else REGISTRY_BASE


def default_wheelhouse() -> Path:
    explicit = os.environ.get("MAC_WHEELHOUSE")
    if explicit:
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mac" / "wheelhouse"


def build_wheelhouse(source: Path, wheels: Path) -> Path:
    """Wheels of MAC and every dependency in `wheels`; offline when they are all there."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        want = ".".join(map(str, IMAGE_PYTHON))
        raise ImageError(
            f"the wheelhouse must be built by Python {want}, the image's, not "
            f"{sys.version.split()[0]}. Run scripts/docker-images with a Python {want} "
            "(PYTHON=python3.11), or copy a wheelhouse built elsewhere to MAC_WHEELHOUSE."
        )
    wheels.mkdir(parents=True, exist_ok=True)
    for old in wheels.glob("mac_monitor-*.whl"):
        old.unlink()  # MAC itself is rebuilt from this source every time
    if not (_fill(source, wheels, offline=True) or _fill(source, wheels, offline=False)):
        raise ImageError(
            f"pip could not fetch MAC's dependencies into {wheels}. On a machine that "
            f"reaches PyPI run scripts/docker-images, then copy {wheels} here (MAC_WHEELHOUSE), "
            "or load ready images: docker load -i mac-images.tar"
        )
    return wheels


def _fill(source: Path, wheels: Path, offline: bool) -> bool:
    """pip wheel (this host's Python), then pip download for the oldest image Python."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    where = ["--find-links", str(wheels), *(["--no-index"] if offline else [])]
    quiet = {"capture_output": True} if offline else {}
    if not offline:
        print(f"==> pip: filling the wheelhouse {wheels} from the package index", flush=True)
        # MAC's own wheel is built from source: its build backend must be in the
        # wheelhouse too, or the next (offline, air-gapped) fill cannot build it.
        backend = subprocess.run(
            [*pip, "download", "--dest", str(wheels), *where, "--only-binary=:all:",
             *build_requirements(source)],
            check=False,
        )  # fmt: skip
        if backend.returncode != 0:
            return False
    built = subprocess.run(
        [*pip, "wheel", "--wheel-dir", str(wheels), *where, str(source)], **quiet, check=False
    )
    mac = sorted(wheels.glob("mac_monitor-*.whl"))
    if built.returncode != 0 or not mac:
        return False
    extra = _older_python_requirements(wheels)
    if not extra:
        return True
    more = subprocess.run(
        [*pip, "download", "--dest", str(wheels), *where, "--only-binary=:all:", *extra],
        **quiet, check=False,
    )  # fmt: skip
    return more.returncode == 0


def build_requirements(source: Path) -> list[str]:
    """pyproject.toml's [build-system] requires: what pip needs to build MAC's wheel."""
    with (source / "pyproject.toml").open("rb") as handle:
        return list(tomllib.load(handle).get("build-system", {}).get("requires", []))


def _older_python_requirements(wheels: Path) -> list[str]:
    """Requirements the wheels declare for the oldest image Python but not for this one.

    pip resolves markers with the interpreter that runs it, so `async-timeout;
    python_full_version < "3.11.3"` (redis) is left out on a newer 3.11 host.
    """
    here = default_environment()
    there = {**here, "python_full_version": OLDEST_PYTHON}
    wanted = set()
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = archive.read(names[0]).decode() if names else ""
        for line in metadata.splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = Requirement(line.partition(":")[2].strip())
            marker = requirement.marker
            if marker is None or "extra" in str(marker):
                continue
            if marker.evaluate(there) and not marker.evaluate(here):
                requirement.marker = None
                wanted.add(str(requirement))
    return sorted(wanted)


def packages(source: Path) -> list[str]:
    """MAC's packages as pyproject.toml lists them, so the image never misses a new one."""
    with (source / "pyproject.toml").open("rb") as handle:
        found = tomllib.load(handle)["tool"]["setuptools"]["packages"]["find"]["include"]
    return [pattern.rstrip("*") for pattern in found]


def sources(source: Path) -> list[str]:
    """Every path of the checkout the image is built from."""
    return [*FILES, *packages(source)]


def build_context(source: Path, wheels: Path, dest: Path) -> Path:
    for name in sources(source):
        path = source / name
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            shutil.copy2(path, target)
    shutil.copytree(wheels, dest / "wheelhouse")
    return dest


def build_image(
    source: Path,
    image: str = DEFAULT_IMAGE,
    base: str | None = None,
    wheels: Path | None = None,
    run: Runner = run_command,
) -> str:
    """Build `image` from `source` with its output shown as it goes; returns the base used."""
    if shutil.which("docker") is None:
        raise ImageError("the docker command is missing: sudo apt-get install docker.io")
    base = base or choose_base(run)
    if base != REGISTRY_BASE and not image_exists(base, run):
        raise ImageError(
            f"the base image {base} is not here. Make the Debian one (no registry needed) "
            f"with: sudo scripts/docker-base {DEBIAN_BASE}"
        )
    wheelhouse = build_wheelhouse(source, wheels or default_wheelhouse())
    with tempfile.TemporaryDirectory(prefix="mac-image-") as tmp:
        context = build_context(source, wheelhouse, Path(tmp) / "context")
        print(f"==> docker build {image} on {base}", flush=True)
        # Docker's own progress (its steps) goes straight to the terminal.
        done = subprocess.run(
            ["docker", "build", "--build-arg", f"BASE_IMAGE={base}", "-f", "docker/Dockerfile",
             "-t", image, str(context)],
            env={**os.environ, "DOCKER_BUILDKIT": "0"}, stdout=sys.stderr, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        hint = ""
        if base == REGISTRY_BASE:
            hint = (
                f" Where no registry answers, make a Debian base first: "
                f"sudo scripts/docker-base {DEBIAN_BASE}"
            )
        raise ImageError(f"docker build of {image} on {base} failed (output above).{hint}")
    return base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/docker-images",
        description="Build MAC's image offline: wheels from the host, base image as you say.",
        epilog="Move it to air-gapped nodes: docker save mac:latest | gzip > mac-images.tar.gz,"
        " then on each node: gunzip -c mac-images.tar.gz | docker load",
    )
    ap.add_argument("--image", default=os.environ.get("MAC_IMAGE") or DEFAULT_IMAGE)
    ap.add_argument(
        "--base",
        help=f"base image (default: MAC_BASE_IMAGE, else {DEBIAN_BASE} when present, "
        f"else {REGISTRY_BASE})",
    )
    ap.add_argument(
        "--wheelhouse", type=Path, help="default: MAC_WHEELHOUSE or ~/.cache/mac/wheelhouse"
    )
    ap.add_argument("--save", type=Path, metavar="FILE", help="also write `docker save` to FILE")
    args = ap.parse_args(argv)
    source = Path(__file__).resolve().parents[2]
    try:
        base = build_image(source, args.image, args.base, args.wheelhouse)
    except ImageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"==> built {args.image} on {base}")
    if args.save:
        try:
            save_image(args.image, args.save)
        except ImageError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            return 1
        print(f"==> saved to {args.save}; on each node: docker load -i {args.save.name}")
    return 0


def save_image(image: str, target: Path) -> None:
    """`docker save` of `image` into `target`, for air-gapped nodes (`docker load -i`).

    No time limit: the image holds Prometheus, VictoriaMetrics, Slurm and a venv, and
    writing it takes minutes on a slow disk. It is written beside `target` and renamed
    into place when complete, so that a failed or interrupted save never leaves a file
    that looks like an image; Docker's own words say why it failed."""
    partial = target.with_name(f"{target.name}.tmp")
    try:
        done = subprocess.run(
            ["docker", "save", "-o", str(partial), image],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            partial.replace(target)
            return
        said = done.stderr.strip() or f"exit code {done.returncode}"
    except OSError as exc:
        said = str(exc)
    finally:
        partial.unlink(missing_ok=True)
    raise ImageError(f"docker save -o {target} {image} failed: {said}")


if __name__ == "__main__":
    sys.exit(main())
