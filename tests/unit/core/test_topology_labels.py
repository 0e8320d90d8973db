"""Topology labels: a node's rack/zone/region/site become its placement path; bad labels
are refused with a message that says what to write."""

from __future__ import annotations

import pytest

from hal.config.topology import topology_from_table
from hal.core.errors import InvalidRequest
from hal.core.topology import TopologyError
from hal.core.topology_labels import (
    check_labels,
    display_name,
    label_path,
    parse_label,
    present_levels,
)


def test_full_labels_make_a_root_first_path() -> None:
    labels = {"rack": "r1", "zone": "z1", "region": "eu", "site": "s1"}
    assert label_path("n1", labels) == ("site=s1", "region=eu", "zone=z1", "rack=r1")


def test_a_node_without_a_rack_is_a_rack_of_its_own() -> None:
    """Two unlabelled-rack nodes in one zone must not look like one rack."""
    a = label_path("n1", {"zone": "z1"})
    b = label_path("n2", {"zone": "z1"})
    assert a[:-1] == b[:-1] == ("site=", "region=", "zone=z1")
    assert a[-1] != b[-1]


def test_no_labels_no_path() -> None:
    assert label_path("n1", {}) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("rack=r1", ("rack", "r1")), (" zone=z-2 ", ("zone", "z-2")), ("site=a.b", ("site", "a.b"))],
)
def test_parse_label(text: str, expected: tuple[str, str]) -> None:
    assert parse_label(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rack", "write KEY=VALUE"),
        ("row=r1", "unknown topology label 'row'"),
        ("rack=", "non-empty name"),
        ("rack=~x", "leading '~'"),
        ("rack=a b", "without spaces"),
    ],
)
def test_bad_labels_are_refused(text: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_label(text)


def test_check_labels_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as err:
        check_labels({"pod": "p1"}, field="topology_labels")
    assert err.value.field == "topology_labels"


def test_present_levels_leaf_first() -> None:
    assert present_levels([{"zone": "z1"}, {"rack": "r1", "site": "s"}]) == ("rack", "zone", "site")
    assert present_levels([{}, {"rack": ""}]) == ()


def test_display_names() -> None:
    assert display_name("rack=r1") == "r1"
    assert display_name("zone=") == "(no zone)"
    assert display_name("rack=~n7") == "(own rack: n7)"


def test_config_label_rules_by_host_list_later_rules_win() -> None:
    topo = topology_from_table(
        {
            "labels": [
                {"nodes": "n[1-4]", "zone": "z1", "rack": "r1"},
                {"nodes": "n[3-4]", "rack": "r2"},
            ]
        }
    )
    assert not topo.has_tree
    assert topo.labels_of("n1") == {"rack": "r1", "zone": "z1"}
    assert topo.labels_of("n4") == {"rack": "r2", "zone": "z1"}
    assert topo.labels_of("n9") == {}


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"rack": "r1"}, "needs nodes"),
        ({"nodes": "n1", "row": "x"}, "unknown key"),
        ({"nodes": "n1"}, "at least one label"),
        ({"nodes": "n1", "rack": "a b"}, "without spaces"),
        ({"nodes": "n[1-", "rack": "r1"}, "topology.labels"),
    ],
)
def test_bad_label_rules_name_the_table(rule: dict[str, str], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        topology_from_table({"labels": [rule]})
