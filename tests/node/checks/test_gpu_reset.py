"""The `gpu_reset` check: a record of `mac gpu reset` whose process is gone is a reset
that stopped MAC's GPU services and did not start them again.

The whole path (a reset killed with SIGKILL, the next reset, `mac doctor --fix`) runs in
tests/maccli/test_gpu_reset.py; these are the record's own cases, on a scratch /proc.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from node.checks import CHECK_IDS
from node.checks import gpu_reset as records
from node.checks.base import CheckContext, CheckStatus
from node.checks.fixes import Mac
from node.config import NodeConfig
from node.host import Roots
from tests.node.checks.scratch import write

AT = 1_781_000_000.0


def _context(tmp_path: Path, boot: str = "boot-a") -> tuple[CheckContext, NodeConfig]:
    cfg = NodeConfig.load({"MAC_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)})
    write(tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id", f"{boot}\n")
    roots = Roots(proc_root=str(tmp_path / "proc"))
    return CheckContext(roots=roots, extra={"config": cfg}), cfg


def _process(tmp_path: Path, pid: int, start: str) -> None:
    """/proc/<pid>/stat of a live process started at `start` (field 22)."""
    fields = ["S", "1"] + ["0"] * 17 + [start]
    write(tmp_path / "proc" / str(pid) / "stat", f"{pid} (mac gpu) {' '.join(fields)}\n")


def _record(pid: int = 4242, start: str = "9000", boot: str = "boot-a") -> records.ResetRecord:
    return records.ResetRecord(
        ("dcgm-exporter", "mango-sdk-agent"), "docker", "GPU 3 (00000000:86:00.0)", AT, pid,
        start, boot,
    )  # fmt: skip


def test_it_is_one_of_the_doctors_checks_after_the_gpu_ones():
    assert CHECK_IDS.index("gpu_reset") == CHECK_IDS.index("gpu_backends") + 1


def test_it_passes_without_a_record(tmp_path):
    ctx, _ = _context(tmp_path)
    result = records.check_gpu_reset(ctx)
    assert (result.status, result.fix) == (CheckStatus.PASS, "")


def test_a_record_whose_process_is_gone_fails_with_the_restart(tmp_path):
    ctx, cfg = _context(tmp_path)
    path = records.write_record(cfg, _record())
    assert path == tmp_path / "state" / "gpu-reset.json"
    assert oct(path.stat().st_mode & 0o777) == "0o644"  # `mac doctor` as any user

    result = records.check_gpu_reset(ctx)

    when = _record().when()
    assert result.status is CheckStatus.FAIL
    assert result.detail.startswith(
        f"`mac gpu reset` stopped dcgm-exporter, mango-sdk-agent at {when} and did not start "
        "them again (its process, pid 4242, ended"
    )
    assert result.steps == (Mac(("restart", "agent")),) and result.fix == "mac restart agent"


def test_a_record_whose_process_runs_is_a_reset_in_progress(tmp_path):
    ctx, cfg = _context(tmp_path)
    _process(tmp_path, 4242, "9000")
    records.write_record(cfg, _record())
    result = records.check_gpu_reset(ctx)
    assert result.status is CheckStatus.WARN
    assert "`mac gpu reset` (pid 4242) is resetting GPU 3 (00000000:86:00.0)" in result.detail
    assert result.steps == () and result.fix.startswith("ps -o pid,etime,args -p 4242")


def test_a_pid_given_to_another_process_or_a_record_of_another_boot_is_not_running(tmp_path):
    ctx, cfg = _context(tmp_path)
    _process(tmp_path, 4242, "12345")  # the same pid, started later: someone else
    records.write_record(cfg, _record())
    assert records.check_gpu_reset(ctx).status is CheckStatus.FAIL
    _process(tmp_path, 4242, "9000")
    records.write_record(cfg, _record(boot="boot-before-the-power-cut"))
    assert records.check_gpu_reset(ctx).status is CheckStatus.FAIL


def test_this_process_records_itself_so_that_it_reads_as_running():
    record = records.ResetRecord.of_this_process(["dcgm-exporter"], "process", "GPU 0", AT)
    assert record.pid == os.getpid() and record.pid_start and record.boot_id
    assert record.running(Roots())


def test_a_record_it_cannot_read_warns_with_the_restart(tmp_path):
    ctx, cfg = _context(tmp_path)
    write(records.record_path(cfg), '{"services": "dcgm-exporter"')
    result = records.check_gpu_reset(ctx)
    assert result.status is CheckStatus.WARN
    assert "is not a record of `mac gpu reset`" in result.detail
    assert result.fix == "mac restart agent"


def test_in_sys_managers_container_it_reads_the_hosts_record_and_processes(tmp_path):
    """sys-manager reads the host under /host/root and /host/proc: the record a root
    `mac gpu reset` wrote at /var/lib/mac is read there, its process in the host's /proc."""
    host = tmp_path / "host"
    write(host / "proc" / "sys" / "kernel" / "random" / "boot_id", "boot-a\n")
    roots = Roots(rootfs=str(host / "root"), proc_root=str(host / "proc"))
    cfg = NodeConfig.load({"HOME": str(tmp_path), "MAC_NODE_ENV_FILE": str(tmp_path / "env")})
    record = _record()
    body = json.dumps({**asdict(record), "services": list(record.services)})
    write(host / "root" / "var" / "lib" / "mac" / "gpu-reset.json", body)
    ctx = CheckContext(roots=roots, extra={"config": cfg})

    assert records.check_gpu_reset(ctx).status is CheckStatus.FAIL  # its process is gone
    _process(host, 4242, "9000")  # the host's /proc, as mounted at /host/proc
    result = records.check_gpu_reset(ctx)
    assert result.status is CheckStatus.WARN
    assert "`mac gpu reset` (pid 4242) is resetting GPU 3" in result.detail


def test_a_users_own_agents_record_is_the_one_that_user_reads_and_clears(tmp_path, monkeypatch):
    """An agent op started keeps its state in op's ~/.mac/state/<host>; root resets its GPU
    through the command `sudo mac gpu reset` names (MAC_STATE_DIR set to that folder),
    which records there. op's `mac doctor` reads that record, op's restart removes it; with
    none there, op's tools read root's, at /var/lib/mac, as before."""
    monkeypatch.setenv("HOME", str(tmp_path / "op"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    environ = {"HOME": str(tmp_path / "op"), "MAC_NODE_ENV_FILE": str(tmp_path / "env")}
    op = NodeConfig.load(environ)
    assert records.record_path(op) == Path("/var/lib/mac/gpu-reset.json")
    root_for_op = NodeConfig.load({**environ, "MAC_STATE_DIR": str(op.state_dir)})
    written = records.write_record(root_for_op, _record())
    assert written == op.state_dir / "gpu-reset.json"

    assert records.record_path(op) == written
    write(tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id", "boot-a\n")
    ctx = CheckContext(roots=Roots(proc_root=str(tmp_path / "proc")), extra={"config": op})
    result = records.check_gpu_reset(ctx)
    assert result.status is CheckStatus.FAIL and result.fix == "mac restart agent"
    records.remove_record(op)
    assert not written.exists()
    assert records.record_path(op) == Path("/var/lib/mac/gpu-reset.json")  # root's again
