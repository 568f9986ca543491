"""bench.hostpages serves a healthy node: what MAC's rules watch stands still, the rest
moves, so a benchmark's fleet fires no alert and its stores still compress live data."""

from __future__ import annotations

import pytest

from bench import hostpages


@pytest.fixture(scope="module")
def variants() -> list[dict[tuple, float]]:
    path = hostpages.captures_dir() / hostpages.CAPTURE
    if not path.exists():
        pytest.skip(f"the node_exporter capture is not here: {path}")
    lines, moves = hostpages.page_lines(path.read_text())
    pages = []
    for variant in range(hostpages.VARIANTS):
        text = hostpages.render_variant(lines, moves, variant).decode()
        # By hand: prometheus_client's parser refuses the capture's DMI line (a \x1c in
        # a label value, which Prometheus and vmagent take).
        served = [line for line in text.split("\n") if line and line[:1] != "#"]
        samples = (line.rpartition(" ") for line in served)
        pages.append({series: float(value) for series, _, value in samples})
    return pages


def family(series: str) -> str:
    return series.split("{", 1)[0]


def test_a_page_has_the_series_of_a_real_node(variants):
    assert len(variants[0]) == hostpages.HOST_SERIES
    assert all(page.keys() == variants[0].keys() for page in variants)


def test_rdma_ports_stay_active_and_their_error_counters_stand_still(variants):
    """What RdmaLinkDown and RdmaPortErrorsRising read."""
    states = [key for key in variants[0] if family(key) == "node_infiniband_state_id"]
    errors = [
        key for key in variants[0]
        if family(key).startswith("node_infiniband_") and hostpages.STILL_COUNTER.search(key)
    ]  # fmt: skip
    assert states and errors
    for page in variants:
        assert {page[key] for key in states} == {4.0}  # ACTIVE
        assert all(page[key] == variants[0][key] for key in errors)


def test_traffic_counters_grow_and_quantities_move(variants):
    read = [key for key in variants[0] if family(key) == "node_disk_read_bytes_total"]
    assert read
    for key in read:
        values = [page[key] for page in variants]
        assert values == sorted(values) and values[-1] > values[0]
    moving = [key for key in variants[0] if family(key) == "node_load1"]
    assert moving and len({page[moving[0]] for page in variants}) > 1


@pytest.mark.parametrize(
    ("name", "kind", "expected"),
    [
        ("node_network_receive_errs_total", "counter", hostpages.STILL),
        ("node_infiniband_link_downed_total", "counter", hostpages.STILL),
        ("node_network_receive_bytes_total", "counter", hostpages.GROWS),
        ("node_infiniband_physical_state_id", "gauge", hostpages.STILL),
        ("node_filesystem_readonly", "gauge", hostpages.STILL),
        ("node_memory_MemAvailable_bytes", "gauge", hostpages.WOBBLES),
    ],
)
def test_each_family_moves_as_on_a_healthy_node(name, kind, expected):
    assert hostpages.motion(name, kind) == expected
