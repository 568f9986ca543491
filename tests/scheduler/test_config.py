"""MAC's host names to Slurm's NodeNames, and whether Slurm is configured."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduler.config import NodeNameMap, slurm_configured


def test_it_maps_to_the_short_name_by_default():
    names = NodeNameMap.parse("")

    assert names.to_slurm("gpu-01.dc.example") == "gpu-01"


def test_it_takes_the_sites_pairs_first():
    names = NodeNameMap.parse(" gpu-01.dc = n001 , gpu-02.dc=n002")

    assert names.to_slurm("gpu-02.dc") == "n002"
    assert names.to_slurm("gpu-03.dc") == "gpu-03"
    assert names.to_slurm("gpu-01.dc") == "n001"


def test_it_reads_pairs_from_a_file(tmp_path):
    path = tmp_path / "names"
    path.write_text("# MAC = Slurm\ngpu-01=n001\n\ngpu-02=n002  # rack b\n")

    assert NodeNameMap.parse(f"@{path}").to_slurm("gpu-02") == "n002"


@pytest.mark.parametrize("text", ["gpu-01", "=n001", "gpu-01=", "@/nonexistent/map"])
def test_a_bad_map_names_the_setting_and_the_fix(text):
    with pytest.raises(ImproperlyConfigured, match="MAC_SLURM_NODE_MAP"):
        NodeNameMap.parse(text)


def test_it_is_configured_only_where_slurm_conf_exists(settings, tmp_path):
    settings.SLURM_CONF = tmp_path / "slurm.conf"
    assert not slurm_configured()

    settings.SLURM_CONF.write_text("ClusterName=lab\n")
    assert slurm_configured()
