"""MAC's host names to Slurm's NodeNames, and whether Slurm is configured."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from scheduler.config import NODE_MAP_ERROR_KEY, NodeNameMap, node_map_error, slurm_configured


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


def test_a_map_of_ten_thousand_hosts_gives_each_its_name(tmp_path):
    path = tmp_path / "names"
    path.write_text("".join(f"gpu-{n:05d}.dc=n{n:05d}\n" for n in range(10_000)))
    names = NodeNameMap.parse(f"@{path}")

    assert [names.to_slurm(f"gpu-{n:05d}.dc") for n in (0, 4_321, 9_999)] == [
        "n00000", "n04321", "n09999",
    ]  # fmt: skip
    assert names.to_slurm("gpu-10000.dc") == "gpu-10000"
    assert len({names.to_slurm(f"gpu-{n:05d}.dc") for n in range(10_000)}) == 10_000


@pytest.mark.parametrize(
    "text", ["gpu-01", "=n001", "gpu-01=", "@/nonexistent/map", "gpu01:gpu-01", "a=b,a=c"]
)
def test_a_bad_map_names_the_setting_and_the_fix(text):
    with pytest.raises(ImproperlyConfigured, match="MAC_SLURM_NODE_MAP"):
        NodeNameMap.parse(text)


def test_a_map_the_pass_cannot_read_is_kept_for_health_until_a_pass_reads_it(settings, tmp_path):
    path = tmp_path / "names"
    settings.SLURM_NODE_MAP = f"@{path}"
    cache.delete(NODE_MAP_ERROR_KEY)
    try:
        with pytest.raises(ImproperlyConfigured):
            NodeNameMap.from_settings()
        first = node_map_error()
        assert first["error"].startswith(
            f"MAC_SLURM_NODE_MAP='@{path}': cannot read {path} (No such file or directory)"
        )
        with pytest.raises(ImproperlyConfigured):
            NodeNameMap.from_settings()
        assert node_map_error()["since"] == first["since"]  # failing since the first pass

        path.write_text("gpu-01=n001\n")
        assert NodeNameMap.from_settings().to_slurm("gpu-01") == "n001"
        assert node_map_error() is None
    finally:
        cache.delete(NODE_MAP_ERROR_KEY)


def test_it_is_configured_only_where_slurm_conf_exists(settings, tmp_path):
    settings.SLURM_CONF = tmp_path / "slurm.conf"
    assert not slurm_configured()

    settings.SLURM_CONF.write_text("ClusterName=lab\n")
    assert slurm_configured()
