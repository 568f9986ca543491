"""Another Debian release's packages, unpacked beside this host's for tests and benchmarks.

The engines MAC runs come from Debian: this machine (bookworm) has Prometheus 2.42 and
VictoriaMetrics 1.79, a site on Debian 13 (trixie) gets 2.53 and 1.112. To test and
measure the newer ones here without touching the host's packages (their dependencies
would not all be met, and apt would then refuse every later install), apt downloads
them with folders of its own (its lists and cache under CACHE/<release>/apt) and each
.deb is unpacked under CACHE/<release>/root. A manifest there (programs.json) records
which package and version each program came from, so a report can say what it measured:
`program_version(path)` reads it, or asks dpkg for a program of the host's own.

    python -m testkit.debian_release trixie victoria-metrics prometheus
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
CACHE = Path(os.environ.get("MAC_BENCH_DEBIAN_CACHE", "/var/tmp/mac-bench-debian"))
MANIFEST = "programs.json"


def _apt_options(folder: Path, release: str) -> list[str]:
    """apt with its own sources, lists and cache: the host's are never read or written."""
    sources = folder / "sources.list"
    sources.write_text(f"deb {MIRROR} {release} main\n")
    for sub in ("lists/partial", "cache/archives/partial"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    # As root, apt would download as its sandbox user, who cannot write our folders.
    sandbox = ["-oAPT::Sandbox::User=root"] if os.geteuid() == 0 else []
    return [
        f"-oDir::Etc::sourcelist={sources}",
        "-oDir::Etc::sourceparts=/dev/null",
        f"-oDir::State::Lists={folder / 'lists'}",
        f"-oDir::Cache={folder / 'cache'}",
        *sandbox,
    ]


def _run(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def fetch(release: str, packages: list[str], cache: Path = CACHE) -> Path:
    """Download and unpack `packages` of Debian `release`; the unpacked root folder.

    Packages already unpacked (named in the manifest) are not fetched again."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise RuntimeError("apt-get and dpkg-deb are needed (a Debian host)")
    folder = cache / release
    root = folder / "root"
    root.mkdir(parents=True, exist_ok=True)
    manifest_path = root / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    missing = [p for p in packages if p not in {v["package"] for v in manifest.values()}]
    if not missing:
        return root
    apt = folder / "apt"
    apt.mkdir(parents=True, exist_ok=True)
    options = _apt_options(apt, release)
    print(f"apt: reading Debian {release}'s package lists ({MIRROR})", flush=True)
    _run(["apt-get", *options, "update"])
    downloads = folder / "debs"
    downloads.mkdir(exist_ok=True)
    for package in missing:
        print(f"apt: downloading {package} from Debian {release}", flush=True)
        _run(["apt-get", *options, "download", package], cwd=downloads)
        deb = max(downloads.glob(f"{package}_*.deb"), key=lambda p: p.stat().st_mtime)
        version = _run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
        _run(["dpkg-deb", "-x", str(deb), str(root)])
        for line in _run(["dpkg-deb", "-c", str(deb)]).splitlines():
            # mode owner size date time ./path[ -> target]
            path = line.split(None, 5)[-1].split(" -> ")[0].removeprefix(".")
            if ("/bin/" in path or "/sbin/" in path) and not path.endswith("/"):
                manifest[path] = {"package": package, "version": version, "release": release}
        print(f"apt: {package} {version} unpacked in {root}", flush=True)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return root


def program_version(program: str) -> str:
    """ "<package> <version> (Debian <release>)" for a program unpacked by fetch(), or
    "<package> <version> (this host's)" for one dpkg installed; "" when neither knows it."""
    path = Path(program).absolute()
    for parent in path.parents:
        manifest = parent / MANIFEST
        if manifest.exists():
            entry = json.loads(manifest.read_text()).get(f"/{path.relative_to(parent)}")
            if entry:
                return f"{entry['package']} {entry['version']} (Debian {entry['release']})"
            return ""
    if not shutil.which("dpkg-query"):
        return ""
    for spelled in dict.fromkeys((program, str(path.resolve()))):  # /usr/bin or /bin
        owner = subprocess.run(["dpkg-query", "-S", spelled], capture_output=True, text=True)
        if owner.returncode == 0:
            package = owner.stdout.split(":", 1)[0].strip()
            version = _run(["dpkg-query", "-W", "-f=${Version}", package]).strip()
            return f"{package} {version} (this host's)"
    return ""


# The settings that name MAC's engine programs (contract.settings.launch), by program.
PROGRAM_SETTINGS = {
    "prometheus": "MAC_PROMETHEUS_BIN",
    "victoria-metrics": "MAC_VICTORIA_METRICS_BIN",
    "vmagent": "MAC_VMAGENT_BIN",
    "vmalert": "MAC_VMALERT_BIN",
}


def mac_settings(root: Path, packages: list[str]) -> dict[str, str]:
    """MAC_*_BIN for the engine programs of `packages` unpacked under `root` by fetch()."""
    manifest = json.loads((root / MANIFEST).read_text())
    return {
        PROGRAM_SETTINGS[Path(path).name]: str(root / path.lstrip("/"))
        for path, entry in manifest.items()
        if entry["package"] in packages and Path(path).name in PROGRAM_SETTINGS
    }


def upstream(version: str) -> str:
    """The upstream part of a Debian version: 1.112.0+ds1-2 -> 1.112.0."""
    return version.split(":")[-1].split("+")[0].split("-")[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("release", help="a Debian release, e.g. trixie")
    parser.add_argument("packages", nargs="+")
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    try:
        root = fetch(args.release, args.packages, args.cache)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    manifest = json.loads((root / MANIFEST).read_text())
    for path, entry in sorted(manifest.items()):
        if entry["package"] in args.packages:
            print(f"{root}{path}: {entry['package']} {entry['version']}")
    print(f"Next: point MAC_*_BIN at these, or run bench.scale_metrics --debian {args.release}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
