"""sys-manager: the checks' results as /diagnostics and as gauges."""

from __future__ import annotations

from pathlib import Path

from exporters.runtime import Exporter
from exporters.sysmanager import (
    ChecksSource,
    check_context,
    diagnosis,
    diagnostics_answer,
    netns_of_its_own,
)
from node.checks import CheckContext, CheckResult, CheckStatus, gpu_reset, run_checks
from node.config import NodeConfig
from node.host import Roots
from tests.node.checks.scratch import snmp, write
from tests.node.checks.standins import lookup_in, service_at

RESULTS = [
    CheckResult("master_ip", "MASTER_IP is set", CheckStatus.PASS, "10.0.0.1"),
    CheckResult("ip_forward", "IPv4 forwarding", CheckStatus.FAIL, "0", "sudo sysctl -w ..."),
    CheckResult("docker_enabled", "Docker at boot", CheckStatus.WARN, "disabled"),
]


def test_check_context_follows_the_roots():
    ctx = check_context(Roots("/host/sys", "/host/proc", "/host/dev", "/host/root"))
    assert ctx.local("/sys/class/net") == Path("/host/sys/class/net")
    assert ctx.local("/proc/sys/net/ipv4/ip_forward") == Path("/host/proc/sys/net/ipv4/ip_forward")
    assert ctx.local("/dev/kfd") == Path("/host/dev/kfd")
    assert ctx.local("/etc/sysctl.conf") == Path("/host/root/etc/sysctl.conf")
    assert ctx.local("/usr/lib/systemd") == Path("/host/root/usr/lib/systemd")


def test_diagnosis_is_not_ok_when_a_check_fails_but_warnings_are_fine():
    assert diagnosis(RESULTS)["ok"] is False
    assert diagnosis([RESULTS[0], RESULTS[2]])["ok"] is True
    assert diagnosis(RESULTS)["checks"][1]["fix"] == "sudo sysctl -w ..."


def test_check_outcomes_are_gauges():
    registry = Exporter("sys-manager", [ChecksSource(CheckContext(), lambda ctx: RESULTS)]).registry
    assert (
        registry.get_sample_value(
            "mac_node_check_status", {"check": "ip_forward", "status": "fail"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "mac_node_check_status", {"check": "ip_forward", "status": "pass"}
        )
        == 0
    )


def test_a_crash_in_the_checks_is_a_503_that_says_so():
    def broken(ctx):
        raise RuntimeError("proc unreadable")

    status, body = diagnostics_answer(ChecksSource(CheckContext(), broken))
    assert status == 503
    assert body["ok"] is False and "proc unreadable" in body["error"]


def test_an_env_file_it_cannot_read_is_logged_not_a_crash_loop(tmp_path):
    """sys-manager reads the node's env files at start: a per-node file that is a directory
    and a per-user file that is not UTF-8 are said in its log, and it serves all the same
    (a traceback at start would be restarted by supervisord or Docker, forever)."""
    from tests.exporters.conftest import ExporterProcess, fixture_roots_args

    node_file, user_file = tmp_path / "node-env", tmp_path / "user-env"
    node_file.mkdir()
    user_file.write_bytes(b"MAC_LABELS=site=caf\xe9\n")
    env = {"MAC_NODE_ENV_FILE": str(node_file), "MAC_USER_ENV_FILE": str(user_file)}
    process = ExporterProcess("sys-manager", *fixture_roots_args(), env=env)
    try:
        process.wait_ready("/health")
        status, _, _ = process.get("/metrics")
        assert status == 200 and process.proc.poll() is None
    finally:
        process.stop()
    said = process.proc.stdout.read()
    assert f"{node_file} is a directory, not an env file" in said
    assert f"{user_file} is not UTF-8 text (byte 0xe9 on line 1)" in said
    assert "Traceback" not in said


def test_a_namespace_of_its_own_is_the_bridge_or_one_the_kernel_shows_apart(tmp_path):
    roots = Roots(proc_root=str(tmp_path / "proc"), rootfs=str(tmp_path))
    assert netns_of_its_own(roots, None) is False  # the process runtime: the node's own
    assert netns_of_its_own(roots, "bridge") is True
    assert netns_of_its_own(roots, "host") is False  # pid 1's namespace unreadable
    for pid, inode in (("self", 4026532301), ("1", 4026531833)):
        (tmp_path / f"proc/{pid}/ns").mkdir(parents=True)
        (tmp_path / f"proc/{pid}/ns/net").symlink_to(f"net:[{inode}]")
    assert netns_of_its_own(roots, "host") is True


def test_in_bridge_mode_sys_manager_watches_and_checks_the_hosts_flag(tmp_path):
    """A bridge container's own ip_forward is 1 while the node's is off: the watch, the
    ip_forward check and the reassert's reason all speak of the node's."""
    from tests.exporters.conftest import ExporterProcess

    write(tmp_path / "proc/sys/net/ipv4/ip_forward", "1\n")  # the container's own
    write(tmp_path / "proc/1/net/snmp", snmp("2"))  # the node's: off
    (tmp_path / "rootfs").mkdir()
    env = {
        "MAC_NODE_ENV_FILE": str(tmp_path / "node-env"),
        "MAC_USER_ENV_FILE": str(tmp_path / "user-env"),
        "MAC_AGENT_NETWORK": "bridge",
        "MAC_IPFORWARD_REASSERT": "1",
    }
    roots = ["--proc-root", str(tmp_path / "proc"), "--rootfs", str(tmp_path / "rootfs")]
    process = ExporterProcess("sys-manager", *roots, env=env)
    try:
        process.wait_ready("/health")
        checks = {check["id"]: check for check in process.json("/diagnostics")["checks"]}
        _, metrics, _ = process.get("/metrics")
        health = process.json("/health")  # as of that scrape
    finally:
        process.stop()
    assert "mac_ipforward_enabled 0.0" in metrics.splitlines()
    assert checks["ip_forward"]["status"] == "fail"
    assert "(the host's, from /proc/1/net/snmp)" in checks["ip_forward"]["detail"]
    reassert = health["backends"]["ip_forward_reassert"]
    assert not reassert["available"] and "bridge mode" in reassert["reason"]
    assert (tmp_path / "proc/sys/net/ipv4/ip_forward").read_text() == "1\n"


def test_sys_manager_never_asks_the_gpu_exporter_for_its_backends(monkeypatch):
    """Each GET runs every collector of the GPU exporter; its backends are on its own page."""
    import node.checks as checks

    asked = []

    def check_gpu_backends(ctx):
        asked.append(ctx)
        return []

    monkeypatch.setattr(checks, "CHECKS", [check_gpu_backends])

    assert checks.run_checks(check_context(Roots())) == [] and asked == []


def _host_node_file(rootfs: Path, text: str, monkeypatch) -> None:
    """The host's per-node file as a container sees it (under rootfs); nothing in the
    process environment points elsewhere, as in sys-manager's container."""
    for key in ("MAC_NODE_ENV_FILE", "MASTER_IP", "MAC_PORT_OFFSET", "MAC_SYS_EXPORTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    write(rootfs / "etc/mango/mac/env", text)


def test_in_a_container_the_checks_read_the_host_s_per_node_file(tmp_path, monkeypatch):
    """Not the container's own /etc/mango/mac/env, which does not exist: MASTER_IP there
    would read as unset, and a moved port as the table's."""
    _host_node_file(tmp_path, "MASTER_IP=10.1.2.3\nMAC_PORT_OFFSET=7\n", monkeypatch)
    ctx = check_context(Roots(rootfs=str(tmp_path)))
    ctx.extra["only"] = {"master_ip"}
    [master_ip] = run_checks(ctx)
    assert master_ip.status == CheckStatus.PASS, master_ip
    assert ctx.extra["config"].service_port("sys-exporter") == 29101 + 7


def test_in_a_container_a_state_dir_passed_by_mac_finds_a_reset_s_record(tmp_path, monkeypatch):
    """MAC_STATE_DIR set only in the environment `mac start agent` ran in (Compose passes
    it to sys-manager's container), not in the per-node file: the gpu_reset check reads
    the record a killed `mac gpu reset` left there, under the host's /."""
    _host_node_file(tmp_path, "", monkeypatch)
    monkeypatch.setenv("MAC_STATE_DIR", "/srv/mac-state")
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    record = gpu_reset.ResetRecord(
        ("dcgm-exporter",), "docker", "GPU 0", 1_781_000_000.0, 4_194_304, "1", boot
    )  # a pid above the kernel's pid_max: its process is gone
    host = NodeConfig.load({"MAC_STATE_DIR": str(tmp_path / "srv/mac-state")})
    gpu_reset.write_record(host, record)

    ctx = check_context(Roots(rootfs=str(tmp_path)))
    result = gpu_reset.check_gpu_reset(ctx)

    assert result.status is CheckStatus.FAIL, result
    assert "`mac gpu reset` stopped dcgm-exporter" in result.detail
    assert result.fix == "mac restart agent"


def test_in_bridge_mode_sys_manager_asks_a_bridged_service_by_its_name(tmp_path, monkeypatch):
    """Its own namespace's 127.0.0.1 is itself alone: sys-exporter (here on 127.0.0.2, as
    Docker's DNS would give its container) is asked by name, on the node's port."""
    with service_at("127.0.0.2") as port:
        _host_node_file(tmp_path, f"MAC_SYS_EXPORTER_PORT={port}\n", monkeypatch)
        ctx = check_context(Roots(rootfs=str(tmp_path)), netns_of_its_own=True)
        ctx.extra.update(
            only={"service:sys-exporter"},
            services=["sys-exporter"],
            resolve=lookup_in({"sys-exporter": "127.0.0.2"}),
        )
        [result] = run_checks(ctx)
    assert result.status == CheckStatus.PASS, result
    assert result.detail == (
        f"http://127.0.0.2:{port}/metrics (sys-exporter on the agent bridge) answered 200"
    )
