"""GPU plumbing (NVIDIA Container Toolkit, /dev/kfd and /dev/dri, amdgpu), the GPU exporter's
backends, and RDMA counters."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from exporters.nvidia import NvmlSource, generate_dcgm_latest
from exporters.runtime import Exporter
from node.checks import CheckContext, CheckStatus
from node.checks.gpu import (
    check_amd_devices,
    check_amdgpu_module,
    check_gpu_backends,
    check_nvidia_toolkit,
)
from node.checks.rdma import check_rdma_counters
from node.config import NodeConfig
from node.hardware import detect_gpus
from node.host import Roots
from testkit.fakehttp import JsonHandler, NotHttp, serving
from testkit.fakes.nvml import two_h200s
from testkit.ports import free_port
from tests.node.checks.scratch import write


def _ctx(tmp_path: Path, **extra) -> CheckContext:
    return CheckContext(roots=_roots(tmp_path), extra=extra)


def _roots(tmp_path: Path) -> Roots:
    return Roots(
        sys_root=str(tmp_path / "sys"),
        proc_root=str(tmp_path / "proc"),
        dev_root=str(tmp_path / "dev"),
        etc_root=str(tmp_path / "etc"),
    )


def _amd_gpu(tmp_path: Path, card: str = "card0", pci: str = "0000:c1:00.0") -> None:
    device = tmp_path / "sys/bus/pci/devices" / pci
    write(device / "vendor", "0x1002\n")
    write(device / "class", "0x038000\n")
    (tmp_path / "sys/class/drm" / card).mkdir(parents=True)
    os.symlink(device, tmp_path / "sys/class/drm" / card / "device")


def _program(bin_dir: Path, name: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_nvidia_without_toolkit_fails_with_install_steps(tmp_path):
    (tmp_path / "proc/driver/nvidia/gpus/0000:3b:00.0").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/gpus/0000:5e:00.0").mkdir(parents=True)
    _program(tmp_path / "bin", "docker")
    result = check_nvidia_toolkit(_ctx(tmp_path, path=str(tmp_path / "bin")))
    assert result.status == CheckStatus.FAIL
    assert result.detail.startswith("2 NVIDIA GPU(s)")
    assert result.fix.splitlines() == [
        "sudo apt install nvidia-container-toolkit",
        "sudo nvidia-ctk runtime configure --runtime=docker",
        "sudo systemctl restart docker",
        "mac restart agent",
    ]
    _program(tmp_path / "bin", "nvidia-ctk")
    assert check_nvidia_toolkit(_ctx(tmp_path, path=str(tmp_path / "bin"))).status == (
        CheckStatus.PASS
    )


def test_nvidia_checks_skip_without_gpus_or_docker(tmp_path):
    assert check_nvidia_toolkit(_ctx(tmp_path, path="")).status == CheckStatus.SKIP
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidia0").write_text("")
    result = check_nvidia_toolkit(_ctx(tmp_path, path=str(tmp_path / "empty")))
    assert result.status == CheckStatus.SKIP and "no Docker" in result.detail


def test_amd_gpu_without_kfd_and_module_fails(tmp_path):
    _amd_gpu(tmp_path)
    write(tmp_path / "proc/modules", "ext4 999424 1 - Live 0x0\n")
    devices = check_amd_devices(_ctx(tmp_path))
    assert devices.status == CheckStatus.FAIL
    assert "kfd" in devices.detail and "ls -l /dev/kfd /dev/dri" in devices.fix
    module = check_amdgpu_module(_ctx(tmp_path))
    assert module.status == CheckStatus.FAIL
    assert "sudo modprobe amdgpu" in module.fix and "lsmod | grep amdgpu" in module.fix


def test_amd_gpu_with_devices_and_module_passes(tmp_path):
    _amd_gpu(tmp_path)
    write(tmp_path / "dev/kfd", "")
    write(tmp_path / "dev/dri/renderD128", "")
    write(tmp_path / "proc/modules", "amdgpu 12345678 0 - Live 0x0\next4 1 1 - Live 0x0\n")
    assert check_amd_devices(_ctx(tmp_path)).status == CheckStatus.PASS
    assert check_amdgpu_module(_ctx(tmp_path)).status == CheckStatus.PASS
    assert detect_gpus(_roots(tmp_path)) == (
        "amd",
        1,
    )


def test_amd_checks_skip_without_amd_gpu(tmp_path):
    assert check_amd_devices(_ctx(tmp_path)).status == CheckStatus.SKIP
    assert check_amdgpu_module(_ctx(tmp_path)).status == CheckStatus.SKIP


def _thor2(tmp_path: Path, rx: int, tx: int) -> None:
    counters = tmp_path / "sys/class/infiniband/bnxt_re0/ports/1/hw_counters"
    write(counters / "rx_bytes", f"{rx}\n")
    write(counters / "tx_bytes", f"{tx}\n")


def test_rdma_counters_moving_pass(tmp_path):
    _thor2(tmp_path, 1000, 2000)
    ctx = _ctx(tmp_path, sleep=lambda _s: _thor2(tmp_path, 5000, 2000), rdma_interval=0)
    result = check_rdma_counters(ctx)
    assert result.status == CheckStatus.PASS
    assert "bnxt_re0/1/hw_counters/rx_bytes" in result.detail


def test_rdma_counters_still_warn_with_the_ethtool_command(tmp_path):
    _thor2(tmp_path, 1000, 2000)
    result = check_rdma_counters(_ctx(tmp_path, sleep=lambda _s: None))
    assert result.status == CheckStatus.WARN and "bnxt_re0" in result.detail
    assert "ethtool -S <iface> | grep -i rdma" in result.fix


def test_no_rdma_device_skips(tmp_path):
    assert check_rdma_counters(_ctx(tmp_path)).status == CheckStatus.SKIP


def _exporter_page(kmsg: Path) -> bytes:
    """What a real dcgm-exporter (two fake H200s at the NVML boundary) answers the check's
    query, reading its kernel log at ``kmsg``."""
    exporter = Exporter(
        "dcgm-exporter",
        [NvmlSource("gpu-node-17", nvml=two_h200s(), kernel_log=kmsg)],
        exposition=generate_dcgm_latest,
    )
    exporter.page()  # its first scrape reads the kernel log
    return exporter.page(["mac_exporter_backend_available"])


def _backends(tmp_path: Path, page: bytes) -> list:
    class Answer(JsonHandler):
        def do_GET(self):
            self.send_json(200, page)

    (tmp_path / "dev").mkdir(exist_ok=True)
    (tmp_path / "dev/nvidia0").write_text("")
    with serving(Answer) as url:
        port = url.rsplit(":", 1)[1]
        cfg = NodeConfig.load({"MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
                               "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
                               "MAC_DCGM_EXPORTER_PORT": port})  # fmt: skip
        return check_gpu_backends(_ctx(tmp_path, config=cfg))


def test_a_gpu_exporter_that_cannot_read_the_kernel_log_warns_with_its_reason(tmp_path):
    (result,) = _backends(tmp_path, _exporter_page(tmp_path / "no-kmsg"))
    assert (result.id, result.status) == ("gpu_backends:dcgm-exporter", CheckStatus.WARN)
    assert result.detail.startswith(f"kernel_log: cannot read {tmp_path / 'no-kmsg'}")
    assert "CAP_SYSLOG" in result.detail and "nvml" not in result.detail
    assert result.fix.splitlines() == [
        "mac logs dcgm-exporter -n 50",
        "sudo mac restart agent   # the kernel log needs root, or CAP_SYSLOG",
    ]


def test_a_gpu_exporter_with_every_backend_passes(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    (result,) = _backends(tmp_path, _exporter_page(kmsg))
    assert result.status == CheckStatus.PASS and result.detail == "available: nvml, kernel_log"


def test_the_backends_check_skips_a_node_without_gpus_or_an_exporter_that_is_not_up(tmp_path):
    assert check_gpu_backends(_ctx(tmp_path)) == []
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidia0").write_text("")
    cfg = NodeConfig.load({"MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
                           "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
                           "MAC_DCGM_EXPORTER_PORT": str(free_port())})  # fmt: skip
    (result,) = check_gpu_backends(_ctx(tmp_path, config=cfg, http_timeout=1))
    assert result.status == CheckStatus.SKIP and "service:dcgm-exporter says why" in result.detail
    with NotHttp() as other:  # whatever else holds the port: no traceback, no lost checks
        cfg = NodeConfig.load({"MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
                               "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
                               "MAC_DCGM_EXPORTER_PORT": other.url.rsplit(":", 1)[1]})  # fmt: skip
        (result,) = check_gpu_backends(_ctx(tmp_path, config=cfg, http_timeout=1))
    assert result.status == CheckStatus.SKIP and "no answer" in result.detail
