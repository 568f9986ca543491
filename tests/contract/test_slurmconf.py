"""contract.slurmconf: the controllers and munge's socket, read as Slurm writes slurm.conf."""

from __future__ import annotations

from pathlib import Path

from contract.slurmconf import DEFAULT_MUNGE_SOCKET, Controller, read_slurm_conf


def _conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slurm.conf"
    path.write_text(text)
    return path


def test_controllers_with_and_without_addresses_in_order(tmp_path):
    conf = read_slurm_conf(
        _conf(
            tmp_path,
            "# the cluster's controllers\n"
            "ClusterName=gpu\n"
            "SlurmctldHost=ctl01(10.4.0.1)   # primary\n"
            "slurmctldhost=ctl02\n"
            "NodeName=gpu[01-16] NodeAddr=10.4.1.[1-16] Gres=gpu:8 State=UNKNOWN\n",
        )
    )
    assert conf.controllers == (Controller("ctl01", "10.4.0.1"), Controller("ctl02"))
    assert conf.munge_socket == DEFAULT_MUNGE_SOCKET


def test_the_older_control_machine_keys_with_a_backup(tmp_path):
    conf = read_slurm_conf(
        _conf(
            tmp_path,
            "ControlMachine=head\nControlAddr=127.0.0.1\nBackupController=head2\nBackupAddr=10.0.0.2\n",
        )
    )
    assert conf.controllers == (Controller("head", "127.0.0.1"), Controller("head2", "10.0.0.2"))
    assert [c.loopback for c in conf.controllers] == [True, False]


def test_munge_socket_from_auth_info_and_an_included_file(tmp_path):
    (tmp_path / "extra.conf").write_text(
        "AuthInfo=cred_expire=120,socket=/var/run/munge/alt.socket\n"
    )
    conf = read_slurm_conf(_conf(tmp_path, "SlurmctldHost=ctl\nInclude extra.conf\n"))
    assert conf.munge_socket == Path("/var/run/munge/alt.socket")
    assert conf.controllers == (Controller("ctl"),)


def test_loopback_is_an_address_of_loopback_only():
    assert Controller("a", "::1").loopback and Controller("a", "127.0.1.1").loopback
    assert not Controller("a").loopback
    assert not Controller("a", "10.0.0.1").loopback
    assert not Controller("a", "not-an-address").loopback


def test_a_file_without_controllers_reads_as_none(tmp_path):
    assert read_slurm_conf(_conf(tmp_path, "")).controllers == ()


def test_spaces_around_equals_quotes_continued_lines_and_a_tab_after_include(tmp_path):
    (tmp_path / "ctl.conf").write_text("SlurmctldHost=ctl02(ctl02-ib)\n")
    conf = read_slurm_conf(
        _conf(
            tmp_path,
            "SlurmctldHost = ctl01(10.4.0.1)\n"
            'AuthInfo = "socket=/srv/munge/m.sock"\n'
            "NodeName=gpu01 NodeAddr=10.4.1.1 \\\n"
            "   Gres=gpu:8\n"
            "Include\tctl.conf\n",
        )
    )
    assert conf.controllers == (Controller("ctl01", "10.4.0.1"), Controller("ctl02", "ctl02-ib"))
    assert conf.munge_socket == Path("/srv/munge/m.sock")


def test_this_machine_by_name_is_loopback_too_and_a_host_name_address_is_its_target():
    assert Controller("localhost").loopback and Controller("head", "LOCALHOST").loopback
    assert Controller("ctl", "ctl-ib").target == "ctl-ib" and not Controller("ctl", "ctl-ib").ip
    assert Controller("ctl", "10.0.0.1").ip and Controller("10.0.0.1").ip


def test_slurmdbd_where_accounting_goes_through_it_localhost_by_default(tmp_path):
    text = "SlurmctldHost=ctl\nAccountingStorageType=accounting_storage/slurmdbd\n"
    conf = read_slurm_conf(_conf(tmp_path, text))
    assert conf.accounting == (Controller("localhost"),) and conf.accounting[0].loopback
    conf = read_slurm_conf(
        _conf(tmp_path, text + "AccountingStorageHost=dbd01\nAccountingStorageBackupHost=dbd02\n")
    )
    assert conf.accounting == (Controller("dbd01"), Controller("dbd02"))
    # No slurmdbd (no accounting, or to a text file): sacct asks nobody, nothing to reach.
    assert read_slurm_conf(_conf(tmp_path, "SlurmctldHost=ctl\n")).accounting == ()
    other = "AccountingStorageType=accounting_storage/none\nAccountingStorageHost=db\n"
    assert read_slurm_conf(_conf(tmp_path, other)).accounting == ()


def test_includes_are_listed_as_slurm_opens_them_with_the_cluster_name(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "gpu_nodes.conf").write_text("NodeName=gpu01 Gres=gpu:8\nInclude parts.conf\n")
    # Relative names are read from slurm.conf's folder, whichever file includes them.
    (tmp_path / "parts.conf").write_text("PartitionName=all Nodes=ALL\n")
    (site / "parts.conf").write_text("SlurmctldHost=wrong\n")
    conf = read_slurm_conf(
        _conf(
            tmp_path,
            "ClusterName=gpu\nSlurmctldHost=ctl\n"
            f"Include {site}/%c_nodes.conf\n"
            "Include absent.conf\n",  # Slurm's own tools say so; nothing to mount
        )
    )
    assert conf.includes == (site / "gpu_nodes.conf", tmp_path / "parts.conf")
    assert conf.controllers == (Controller("ctl"),)
