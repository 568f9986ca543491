"""What `mac start master` prints of where things are (maccli.master.commands.where_lines):
a site's own engines named without the credentials in their URLs."""

from __future__ import annotations

from maccli.master.commands import where_lines
from maccli.master.layout import master_layout
from node.config import NodeConfig
from tests.maccli.test_scaleout_specs import _config  # a master's settings in tmp_path


def _where(cfg: NodeConfig) -> str:
    return "\n".join(where_lines(cfg, master_layout(cfg)))


def test_mac_s_own_alertmanager_is_reached_through_the_front_door(tmp_path):
    shown = _where(_config(tmp_path))
    assert "Alertmanager for amtool and Grafana:" in shown
    assert "/alertmanager/)" in shown
    assert "site's Alertmanager" not in shown
    assert "Metrics:" not in shown  # one Prometheus: no store to name


def test_a_site_alertmanager_is_named_without_its_password(tmp_path):
    cfg = _config(tmp_path, MAC_ALERTMANAGER_URL="https://mac:s3cret-pw@am.site.example:9093/")
    shown = _where(cfg)
    assert "(the site's Alertmanager: https://am.site.example:9093/)" in shown
    assert "s3cret-pw" not in shown and "mac:" not in shown


def test_a_site_store_is_named_without_its_password(tmp_path):
    cfg = _config(
        tmp_path,
        MAC_SCRAPE_SHARDS="2",
        MAC_METRICS_STORE_URL="https://writer:st0re-pw@vm.site.example:8427/?authKey=k3y-value",
    )
    shown = _where(cfg)
    assert "Metrics:     store https://vm.site.example:8427/, 2 scrapers" in shown
    assert "st0re-pw" not in shown and "k3y-value" not in shown
