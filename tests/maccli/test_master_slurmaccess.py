"""A master under Docker reaches the host's Slurm (maccli.master.slurmaccess): mac-worker
mounts slurm.conf's folder and munge's, SLURM_CONF points at it, a controller named
without an address is resolved on the host, and a loopback address stops the start with
what to do. The real engine and a real Slurm: tests/docker/test_slurm_worker.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from contract.slurmconf import SlurmConf
from maccli.master import compose, slurmaccess
from maccli.master.slurmaccess import slurm_access
from maccli.output import CliError
from node.config import NodeConfig


def _config(**values: str) -> NodeConfig:
    return NodeConfig(
        environ=values, node_values={}, user_values={}, node_file=Path("/nonexistent/node"),
        user_file=Path("/nonexistent/user"),
    )  # fmt: skip


def _slurm_conf(tmp_path: Path, controller: str, auth: str = "") -> Path:
    folder = tmp_path / "slurm"
    folder.mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(f"ClusterName=gpu\nSlurmctldHost={controller}\n{auth}")
    return conf


def test_no_slurm_conf_mounts_nothing(tmp_path):
    cfg = _config(SLURM_CONF=str(tmp_path / "absent.conf"))
    assert slurm_access(cfg) is None
    worker = yaml.safe_load(compose.render(cfg))["services"]["worker"]
    assert worker["volumes"] == compose.DATA_VOLUMES and "extra_hosts" not in worker
    assert "userns_mode" not in worker


def test_the_worker_mounts_slurm_conf_and_munge_and_compose_reads_it(tmp_path):
    conf = _slurm_conf(tmp_path, "ctl01(10.4.0.1)", "AuthInfo=socket=/srv/munge/munge.sock\n")
    cfg = _config(SLURM_CONF=str(conf), MAC_DATA_DIR=str(tmp_path / "data"))
    written = compose.write(cfg, tmp_path / "data")
    services = yaml.safe_load(written.read_text())["services"]
    worker = services["worker"]
    assert worker["volumes"][-2:] == [f"{conf.parent}:{conf.parent}:ro", "/srv/munge:/srv/munge:ro"]
    assert worker["environment"]["SLURM_CONF"] == str(conf)
    assert "extra_hosts" not in worker  # slurm.conf gives the address
    # Root in the worker stays root to Slurm and munge under a remapping engine.
    assert worker["userns_mode"] == "host"
    # Only the worker runs Slurm's tools.
    assert all(
        str(conf.parent) not in " ".join(s.get("volumes", []))
        for n, s in services.items()
        if n != "worker"
    )
    done = subprocess.run(
        ["docker-compose", "-p", "mac", "-f", str(written), "config"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    read = yaml.safe_load(done.stdout)
    assert f"{conf.parent}:{conf.parent}:ro" in read["services"]["worker"]["volumes"]
    assert read["services"]["worker"]["userns_mode"] == "host"  # Compose 1.29 takes it
    assert set(read["volumes"]) == {v.split(":")[0] for v in compose.DATA_VOLUMES} | {
        "mac-tls",
        "mac-prometheus",
        "mac-alertmanager",
    }


def test_a_controller_named_without_an_address_is_resolved_on_the_host(tmp_path, monkeypatch):
    conf = _slurm_conf(tmp_path, "ctl01")
    answers = {"ctl01": "10.4.0.1", "ctl02": "127.0.1.1"}
    monkeypatch.setattr(slurmaccess, "_resolved", answers.get)
    assert slurm_access(_config(SLURM_CONF=str(conf))).hosts == ("ctl01:10.4.0.1",)
    # Debian names its own host 127.0.1.1: the container reaches the host on its gateway.
    conf.write_text("SlurmctldHost=ctl02\nSlurmctldHost=ctl03\n")
    access = slurm_access(_config(SLURM_CONF=str(conf)))
    assert access.hosts == ("ctl02:host-gateway",)  # ctl03: left to the containers' resolver
    worker = yaml.safe_load(compose.render(_config(SLURM_CONF=str(conf)), access))["services"][
        "worker"
    ]
    assert worker["extra_hosts"] == ["ctl02:host-gateway"]


@pytest.mark.parametrize("controller", ["head(127.0.0.1)", "localhost", "head(localhost)"])
def test_this_machine_itself_stops_a_start_that_drains_with_what_to_do(tmp_path, controller):
    conf = _slurm_conf(tmp_path, controller)
    cfg = _config(SLURM_CONF=str(conf), MAC_SLURM_DRAIN="on")
    with pytest.raises(CliError) as raised:
        compose.write(cfg, tmp_path / "data")
    error = raised.value
    assert error.message.startswith(f"{conf} names slurmctld by this machine itself ({controller})")
    assert "mac env set MAC_RUNTIME=process && mac restart master" in error.commands
    assert not (tmp_path / "data" / compose.NAME).exists()


def test_with_the_drain_off_it_only_warns_and_a_stop_never_asks(tmp_path, capsys):
    conf = _slurm_conf(tmp_path, "head(127.0.0.1)")
    written = compose.write(_config(SLURM_CONF=str(conf)), tmp_path / "data")  # drain off
    assert "MAC will not read Slurm's jobs under Docker" in capsys.readouterr().err
    assert str(conf.parent) in written.read_text()
    drained = _config(SLURM_CONF=str(conf), MAC_SLURM_DRAIN="on")
    stopped = compose.write(drained, tmp_path / "stop", slurm=False)  # `mac stop master`
    assert str(conf.parent) not in stopped.read_text()


def test_a_host_name_in_parentheses_is_resolved_on_the_host(tmp_path, monkeypatch):
    conf = _slurm_conf(tmp_path, "ctl01(ctl01-ib)")
    monkeypatch.setattr(slurmaccess, "_resolved", {"ctl01-ib": "10.8.0.1"}.get)
    assert slurm_access(_config(SLURM_CONF=str(conf))).hosts == ("ctl01-ib:10.8.0.1",)


def test_a_slurm_conf_in_a_system_folder_is_mounted_alone_and_links_are_followed(tmp_path):
    # Never the host's /etc over the container's, nor its /run.
    conf = SlurmConf(Path("/etc/slurm.conf"), (), Path("/run/munge.sock"))
    assert slurmaccess.SlurmAccess(conf, ()).volumes == [
        "/etc/slurm.conf:/etc/slurm.conf:ro",
        "/run/munge.sock:/run/munge.sock:ro",
    ]
    real = _slurm_conf(tmp_path, "ctl(10.0.0.1)")
    link = tmp_path / "link.conf"
    link.symlink_to(real)
    resolved = slurm_access(_config(SLURM_CONF=str(link)))
    assert resolved.environment == {"SLURM_CONF": str(real)}
    assert resolved.volumes[0] == f"{real.parent}:{real.parent}:ro"


def test_slurmdbd_is_resolved_on_the_host_and_localhost_is_a_warning(tmp_path, monkeypatch, capsys):
    conf = _slurm_conf(tmp_path, "ctl01", "AccountingStorageType=accounting_storage/slurmdbd\n")
    monkeypatch.setattr(slurmaccess, "_resolved", {"ctl01": "10.4.0.1", "dbd": "127.0.1.1"}.get)
    cfg = _config(SLURM_CONF=str(conf), MAC_SLURM_DRAIN="on")
    access = slurm_access(cfg)  # Slurm's default localhost: the drain works, sacct cannot
    assert access.hosts == ("ctl01:10.4.0.1",)
    warned = capsys.readouterr().err
    assert "names slurmdbd by this machine itself (localhost;" in warned
    assert "jobs that start and end between two reads of slurmctld are not seen" in warned
    with conf.open("a") as more:
        more.write("AccountingStorageHost=dbd\n")
    # The host's own name (Debian's 127.0.1.1): reached on the containers' gateway.
    assert slurm_access(cfg).hosts == ("ctl01:10.4.0.1", "dbd:host-gateway")
    assert "slurmdbd" not in capsys.readouterr().err


def test_a_munge_socket_alone_in_a_system_folder_is_mounted_with_a_warning(tmp_path, capsys):
    conf = _slurm_conf(tmp_path, "ctl01(10.4.0.1)", "AuthInfo=socket=/run/munge.sock\n")
    access = slurm_access(_config(SLURM_CONF=str(conf)))
    assert "/run/munge.sock:/run/munge.sock:ro" in access.volumes
    warned = capsys.readouterr().err
    assert "munge's socket /run/munge.sock is mounted into mac-worker alone" in warned
    assert "mac restart master" in warned
    conf.write_text("SlurmctldHost=ctl01(10.4.0.1)\n")  # munged's own folder: no warning
    slurm_access(_config(SLURM_CONF=str(conf)))
    assert "munge" not in capsys.readouterr().err


def test_files_included_from_other_folders_are_mounted_too_links_with_their_targets(tmp_path):
    conf = _slurm_conf(tmp_path, "ctl(10.0.0.1)", "Include nodes.conf\n")
    (conf.parent / "nodes.conf").write_text(
        f"Include {tmp_path}/site/gres/parts.conf\nInclude {tmp_path}/site/more.conf\n"
        f"Include {tmp_path}/linked/topology.conf\n"
    )
    (tmp_path / "site" / "gres").mkdir(parents=True)
    (tmp_path / "site" / "gres" / "parts.conf").write_text("PartitionName=all Nodes=ALL\n")
    (tmp_path / "site" / "more.conf").write_text("\n")
    # A link into a shared file system: its folder holds the link, the target's the file.
    (tmp_path / "nfs").mkdir()
    (tmp_path / "nfs" / "topology.conf").write_text("\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "topology.conf").symlink_to(tmp_path / "nfs" / "topology.conf")
    access = slurm_access(_config(SLURM_CONF=str(conf)))
    assert access.volumes == [
        f"{conf.parent}:{conf.parent}:ro",  # nodes.conf is in it already
        f"{tmp_path}/site:{tmp_path}/site:ro",  # covers site/gres
        f"{tmp_path}/linked:{tmp_path}/linked:ro",
        f"{tmp_path}/nfs:{tmp_path}/nfs:ro",
        "/run/munge:/run/munge:ro",
    ]
    # An include directly in a system folder is mounted alone.
    system = SlurmConf(conf, (), Path("/run/munge/munge.socket.2"), (), (Path("/etc/nodes.conf"),))
    assert slurmaccess.SlurmAccess(system, ()).volumes == [
        f"{conf.parent}:{conf.parent}:ro",
        "/etc/nodes.conf:/etc/nodes.conf:ro",
        "/run/munge:/run/munge:ro",
    ]


def test_the_node_maps_file_is_mounted_where_slurm_confs_folder_does_not_cover_it(tmp_path):
    """The drain and job reads run in mac-worker and read MAC_SLURM_NODE_MAP's @file at each
    pass: without the mount they stopped at it while the host's file was fine."""
    conf = _slurm_conf(tmp_path, "ctl01(10.4.0.1)", "AuthInfo=socket=/srv/munge/munge.sock\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "nodemap").write_text("gpu-01.dc=gpu01\n")
    cfg = _config(SLURM_CONF=str(conf), MAC_SLURM_NODE_MAP=f"@{site / 'nodemap'}")
    assert f"{site}:{site}:ro" in slurm_access(cfg).volumes

    beside = conf.parent / "nodemap"
    beside.write_text("gpu-01.dc=gpu01\n")
    cfg = _config(SLURM_CONF=str(conf), MAC_SLURM_NODE_MAP=f"@{beside}")
    volumes = slurm_access(cfg).volumes
    assert volumes == [f"{conf.parent}:{conf.parent}:ro", "/srv/munge:/srv/munge:ro"]

    cfg = _config(SLURM_CONF=str(conf), MAC_SLURM_NODE_MAP="gpu-01.dc=gpu01")
    assert len(slurm_access(cfg).volumes) == 2
