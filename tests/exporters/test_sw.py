"""sw-exporter: version parsers and the info metrics."""

from __future__ import annotations

import pytest

from exporters.runtime import Exporter, mac_version
from exporters.sw import (
    SoftwareSource,
    parse_cuda_version,
    parse_nvidia_driver_version,
    parse_os_release,
    parse_rocm_version,
    parse_tool_version,
)
from node.host import Roots
from tests.exporters.conftest import FIXTURES, assert_golden, scrape_text

ROOTS = Roots(proc_root=str(FIXTURES / "proc"), rootfs=str(FIXTURES / "rootfs"))
COMMANDS = {
    ("docker", "--version"): FIXTURES / "commands" / "docker_version.txt",
    ("containerd", "--version"): FIXTURES / "commands" / "containerd_version.txt",
}


def recorded(args: list[str]) -> str:
    return COMMANDS[tuple(args)].read_text()


def missing(args: list[str]) -> str:
    raise FileNotFoundError(args[0])


def test_version_parsers_on_recorded_files():
    assert parse_nvidia_driver_version((FIXTURES / "proc/driver/nvidia/version").read_text()) == (
        "550.90.07"
    )
    assert parse_cuda_version((FIXTURES / "rootfs/usr/local/cuda/version.json").read_text()) == (
        "12.4.1"
    )
    assert parse_cuda_version("CUDA Version 11.8.89\n") == "11.8.89"
    assert parse_rocm_version("6.2.4-99\n") == "6.2.4"
    assert parse_os_release((FIXTURES / "rootfs/etc/os-release").read_text())["VERSION_ID"] == (
        "22.04"
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("Docker version 27.3.1, build ce12230", "27.3.1"),
        ("containerd containerd.io 1.7.22 7f7fdf5fed64eb6a7caf99b3e12efcf9d60e311c", "1.7.22"),
        ("containerd github.com/containerd/containerd v1.6.12 a05d175", "1.6.12"),
    ],
)
def test_parse_tool_version(text, version):
    assert parse_tool_version(text) == version


def test_every_component_found_is_an_info_series():
    registry = Exporter("sw-exporter", [SoftwareSource(ROOTS, runner=recorded)]).registry
    for component, version in (
        ("kernel", "6.8.0-45-generic"),
        ("nvidia_driver", "550.90.07"),
        ("cuda", "12.4.1"),
        ("rocm", "6.2.4"),
        ("docker", "27.3.1"),
        ("containerd", "1.7.22"),
        ("mac", mac_version()),
    ):
        labels = {"component": component, "version": version}
        assert registry.get_sample_value("mac_software_version_info", labels) == 1, component


def test_absent_software_is_absent_not_an_error(tmp_path):
    registry = Exporter(
        "sw-exporter", [SoftwareSource(Roots(proc_root=str(tmp_path), rootfs=str(tmp_path)),
                                       runner=missing)]
    ).registry  # fmt: skip
    names = {s.labels["component"] for m in registry.collect() for s in m.samples
             if m.name == "mac_software_version"}  # fmt: skip
    assert names == {"mac"}
    assert registry.get_sample_value("mac_exporter_collector_success", {"collector": "software"})


def test_sw_exporter_golden_output():
    exporter = Exporter("sw-exporter", [SoftwareSource(ROOTS, runner=recorded)])
    text = scrape_text(exporter.registry).replace(f'version="{mac_version()}"', 'version="MAC"')
    assert_golden("sw-exporter", text)
