"""Summary (counts, tier capacity, bisection) and the PNG drawing."""

import pytest

import topologies
from fabric.analysis.draw import draw_png, layout
from fabric.analysis.summary import format_summary, summarize


def test_rail_clos_summary():
    s = summarize(topologies.build("rail-clos"))
    assert s["name"] == "rail-clos" and s["spec"] == "rail-clos"
    assert s["counts"] == {"host": 16, "storage": 0, "leaf": 4, "spine": 4, "core": 0}
    assert s["endpoints"] == 16 and s["links"] == 16 + 16
    leaf = s["tiers"]["leaf"]
    assert leaf["down_gbps"] == pytest.approx(16 * 400) == pytest.approx(leaf["up_gbps"])
    assert leaf["oversubscription"] == pytest.approx(1.0)
    assert s["tiers"]["spine"]["oversubscription"] is None  # nothing above the spines
    assert s["bisection_gbps"] == pytest.approx(8 * 400)


def test_oversub_halves_up():
    base = summarize(topologies.build("rail-clos"))["tiers"]["leaf"]
    over = summarize(topologies.build("rail-clos,oversub=2"))["tiers"]["leaf"]
    assert over["down_gbps"] == pytest.approx(base["down_gbps"])
    assert over["up_gbps"] == pytest.approx(base["up_gbps"] / 2)
    assert over["oversubscription"] == pytest.approx(2.0)


@pytest.mark.parametrize("spec", ["leaf-spine", "fat-tree", "fat-tree,k=6"])
def test_non_blocking_tiers(spec):
    s = summarize(topologies.build(spec))
    for role in ("leaf", "spine") if s["counts"]["core"] else ("leaf",):
        assert s["tiers"][role]["oversubscription"] == pytest.approx(1.0)


def test_fat_tree_bisection():
    s = summarize(topologies.build("fat-tree,k=4"))
    assert s["counts"] == {"host": 16, "storage": 0, "leaf": 8, "spine": 8, "core": 4}
    assert s["tiers"]["core"]["down_gbps"] == pytest.approx(16 * 100)
    assert s["bisection_gbps"] == pytest.approx(8 * 100)


def test_two_zone_interzone_and_bisection():
    s = summarize(topologies.build("two-zone,interzone_links=2,storage=2"))
    assert s["counts"]["storage"] == 2
    assert s["endpoints"] == 12 + 2 * 2  # storage has one NIC per zone
    assert s["interzone_gbps"] == pytest.approx(2 * 200)
    assert s["tiers"]["spine"]["lateral_gbps"] == pytest.approx(2 * 200)
    # Zone 0 vs zone 1 compute hosts: the inter-zone links are the cut, and
    # storage nodes must not bridge the zones.
    assert s["bisection_gbps"] == pytest.approx(2 * 200)
    assert "zone" in s["bisection_split"]


def test_format_summary_mentions_key_figures():
    text = format_summary(summarize(topologies.build("rail-clos")))
    assert "rail-clos" in text and "3200.0" in text and "leaf" in text
    assert len(text.splitlines()) >= 8


def test_layout_groups_rails():
    g = topologies.build("rail-clos")
    pos = layout(g)
    def xs(rail):
        return [pos[h][0] for h in g.nodes
                if g.nodes[h]["role"] == "host" and g.nodes[h]["rail"] == rail]

    rail0, rail1 = xs(0), xs(1)
    assert max(rail0) < min(rail1)
    assert pos["sp0"][1] > pos["r0l0"][1] > pos["h0g0"][1]


@pytest.mark.parametrize("spec", ["rail-clos", "two-zone", "fat-tree"])
def test_draw_png(tmp_path, spec):
    out = draw_png(topologies.build(spec), tmp_path / "fabric.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
