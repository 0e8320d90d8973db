"""``GET /v1/topology``'s label tree and ``hal topology show``'s drawing of labels,
NVLink domains and GPU islands."""

from __future__ import annotations

from hal.api.topology_view import label_domains
from hal.cli.topology import draw
from hal.wire.nodes import NvlinkDomainInfo, TopologyInfo

LABELS = {
    "n1": {"rack": "r1", "zone": "z1"},
    "n2": {"rack": "r1", "zone": "z1"},
    "n3": {"rack": "r2", "zone": "z1"},
    "n4": {"zone": "z2"},  # no rack: a rack of its own
    "n5": {},  # outside the label tree
}


def test_label_domains_in_tree_order_with_free_counts() -> None:
    found = label_domains(LABELS, ("rack", "zone"), idle={"n1", "n3", "n4"})
    rows = [(d.depth, d.level, d.name, d.nodes, d.nodes_total, d.nodes_free) for d in found]
    assert rows == [
        (0, "zone", "z1", [], 3, 2),
        (1, "rack", "r1", ["n1", "n2"], 2, 1),
        (1, "rack", "r2", ["n3"], 1, 1),
        (0, "zone", "z2", [], 1, 1),
        (1, "rack", "(own rack: n4)", ["n4"], 1, 1),
    ]


def test_only_present_levels_are_drawn() -> None:
    """No node has a region or site: the tree starts at the zones."""
    found = label_domains(LABELS, ("rack", "zone"), idle=set())
    assert {d.level for d in found} == {"zone", "rack"}
    assert label_domains(LABELS, (), idle=set()) == []


def test_draw_labels_domains_and_islands() -> None:
    info = TopologyInfo(
        configured=True,
        label_levels=["rack", "zone"],
        labels_place=True,
        label_domains=label_domains(LABELS, ("rack", "zone"), idle={"n1"}),
        nvlink_domains=[NvlinkDomainInfo(name="nvl0", nodes=["g1", "g2"], nodes_free=1)],
        gpu_islands={"g1": [[0, 1, 2, 3], [4, 5, 6, 7]]},
    )
    lines = draw(info).splitlines()
    assert lines[0] == "labels (place jobs): rack, zone"
    assert lines[1].startswith("zone z1") and lines[1].endswith("free    1/3")
    assert lines[2].startswith("  rack r1") and lines[2].endswith("n[1-2]")
    assert any(line.startswith("nvlink domain nvl0") and "g[1-2]" in line for line in lines)
    assert lines[-1] == "gpu islands: g1 0-3,4-7"


def test_nothing_configured_says_how_to_configure() -> None:
    text = draw(TopologyInfo(configured=False))
    assert "--topology-label" in text and "[topology]" in text
