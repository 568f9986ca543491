"""sw-exporter: which kernel, OS, GPU driver, CUDA, ROCm, container runtime and MAC run here.

Operators compare nodes by these versions when one misbehaves ("the only node on
driver 550.90"), so each is an info metric: ``mac_software_version_info{component,
version}`` (one series per component found) plus node_exporter's ``node_os_info``.
Files are read under the configured roots; commands go through an injectable
runner and are cached for a minute, since versions change only on upgrades.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable

from prometheus_client.core import InfoMetricFamily, Metric

from exporters.runtime import Exporter, Options, mac_version
from node.host import Roots, read_text, read_value

CommandRunner = Callable[[list[str]], str]
COMMAND_CACHE_SECONDS = 60.0


def run_command(args: list[str]) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=5, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}")
    return proc.stdout


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value lines of /etc/os-release, quotes removed."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            fields[key] = value.strip().strip("\"'")
    return fields


def parse_nvidia_driver_version(text: str) -> str | None:
    """``NVRM version: NVIDIA UNIX ... Kernel Module  550.90.07  Release ...`` -> 550.90.07."""
    match = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", text)
    return match.group(1) if match else None


def parse_cuda_version(text: str) -> str | None:
    """CUDA's version.json ({"cuda": {"version": ...}}) or the older version.txt."""
    try:
        return json.loads(text)["cuda"]["version"]
    except (ValueError, KeyError, TypeError):
        match = re.search(r"CUDA Version\s+([\d.]+)", text)
        return match.group(1) if match else None


def parse_rocm_version(text: str) -> str | None:
    """/opt/rocm/.info/version: ``6.2.4-99`` -> 6.2.4."""
    match = re.match(r"\s*(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def parse_tool_version(text: str) -> str | None:
    """``Docker version 27.3.1, build ce12230`` / ``containerd github.com/... v1.7.22 ...``."""
    match = re.search(r"\bv?(\d+\.\d+\.\d+[\w.~+-]*)", text)
    return match.group(1).rstrip(",") if match else None


class SoftwareSource:
    """mac_software_version_info{component,version} and node_os_info."""

    name = "software"

    def __init__(self, roots: Roots, runner: CommandRunner = run_command):
        self.roots = roots
        self.runner = runner
        self._commands: dict[tuple[str, ...], tuple[float, str | None]] = {}

    def _command_version(self, args: list[str]) -> str | None:
        key = tuple(args)
        cached = self._commands.get(key)
        if cached and time.monotonic() - cached[0] < COMMAND_CACHE_SECONDS:
            return cached[1]
        try:
            version = parse_tool_version(self.runner(args))
        except (OSError, RuntimeError, subprocess.SubprocessError):
            version = None  # not installed: the component is simply absent
        self._commands[key] = (time.monotonic(), version)
        return version

    def versions(self) -> dict[str, str]:
        """component -> version for everything found (the inventory API uses this too)."""
        found = {
            "kernel": read_value(self.roots.proc("sys", "kernel", "osrelease")),
            "nvidia_driver": parse_nvidia_driver_version(
                read_text(self.roots.proc("driver", "nvidia", "version")) or ""
            ),
            "cuda": parse_cuda_version(
                read_text(self.roots.host("/usr/local/cuda/version.json"))
                or read_text(self.roots.host("/usr/local/cuda/version.txt"))
                or ""
            ),
            "rocm": parse_rocm_version(read_text(self.roots.host("/opt/rocm/.info/version")) or ""),
            "docker": self._command_version(["docker", "--version"]),
            "containerd": self._command_version(["containerd", "--version"]),
            "mac": mac_version(),
        }
        return {component: version for component, version in found.items() if version}

    def os_release(self) -> dict[str, str]:
        text = read_text(self.roots.host("/etc/os-release")) or read_text(
            self.roots.host("/usr/lib/os-release")
        )
        return parse_os_release(text or "")

    def collect(self) -> Iterable[Metric]:
        software = InfoMetricFamily(
            "mac_software_version",
            "Version of each software component found on the node.",
            labels=["component"],
        )
        for component, version in self.versions().items():
            software.add_metric([component], {"version": version})
        yield software
        fields = self.os_release()
        if fields:
            info = InfoMetricFamily(
                "node_os",
                "A metric with a constant '1' value labeled by "
                "build_id, id, id_like, image_id, image_version, name, "
                "pretty_name, variant, variant_id, version, "
                "version_codename, version_id.",
            )
            info.add_metric(
                [],
                {
                    label: fields.get(key, "")
                    for label, key in (
                        ("id", "ID"),
                        ("id_like", "ID_LIKE"),
                        ("name", "NAME"),
                        ("pretty_name", "PRETTY_NAME"),
                        ("version", "VERSION"),
                        ("version_codename", "VERSION_CODENAME"),
                        ("version_id", "VERSION_ID"),
                    )
                },
            )
            yield info


def build(options: Options) -> Exporter:
    return Exporter("sw-exporter", [SoftwareSource(options.roots)], timeout=options.timeout)
