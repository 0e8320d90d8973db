"""The switch tree: Slurm topology.conf and hal.toml [topology] parsing, node paths,
level names, validation errors, synthetic trees; --switches and --topology syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.config.model import config_from_dict, load_config
from hal.config.topology import topology_from_table
from hal.core.errors import InvalidRequest
from hal.core.job import TopologyConstraint
from hal.core.topology import (
    Block,
    Switch,
    Topology,
    TopologyError,
    synthetic_tree,
)
from hal.slurm.syntax import parse_switches, parse_topology
from hal.slurm.topology_conf import format_topology_conf, parse_topology_conf

CONF = """\
# Slurm's example: two leaves under one spine
SwitchName=s0 Nodes=tux[0-3] LinkSpeed=900
SwitchName=s1 Nodes=tux[4-7]
switchname=s2 switches=s[0-1]   # keys in any case
"""


def test_topology_conf_gives_every_node_its_path_from_the_root() -> None:
    topo = parse_topology_conf(CONF)
    assert topo.path_of("tux0") == ("s2", "s0")
    assert topo.path_of("tux7") == ("s2", "s1")
    assert topo.path_of("nobody") == ()
    assert topo.depth == 2
    assert [s.name for s in topo.roots()] == ["s2"]


def test_topology_conf_round_trips_through_format() -> None:
    topo = parse_topology_conf(CONF + "BlockName=b0 Nodes=tux[0-7]\nBlockSizes=4,8\n")
    again = parse_topology_conf(format_topology_conf(topo))
    assert again == topo
    assert [s.link_speed for s in again.switches] == [900, 1, 1]  # kept for scontrol
    assert again.blocks == (Block("b0", tuple(f"tux{i}" for i in range(8))),)
    assert again.block_sizes == (4, 8)


def test_level_names_default_and_configured() -> None:
    topo = parse_topology_conf(CONF)
    assert [topo.level_name(k) for k in range(3)] == ["leaf", "level1", "level2"]
    assert topo.level_of_name("switch") == 0 and topo.level_of_name("level1") == 1
    assert topo.level_of_name("level2") is None  # above this two-level tree
    named = parse_topology_conf(CONF, level_names=("leaf", "spine"))
    assert named.level_of_name("spine") == 1 and named.level_name(1) == "spine"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2\n", "defined twice"),
        ("SwitchName=a Nodes=n1\nSwitchName=b Nodes=n1\n", "under two leaf switches"),
        ("SwitchName=a Switches=ghost\n", "unknown switch 'ghost'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "form a cycle"),
        ("SwitchName=a Switches=a\n", "form a cycle"),
        (
            "SwitchName=l Nodes=n1\nSwitchName=a Switches=l\nSwitchName=b Switches=l\n",
            "under two switches",
        ),
        ("SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Nodes=n2\n", "both nodes and switches"),
        ("SwitchName=a Nodes=n1 Speed=1\n", "unknown key"),
        ("SwitchName=a Nodes=n1 LinkSpeed=fast\n", "LinkSpeed takes a whole number"),
        ("SwitchName=a Nodes=n1 LinkSpeed=0\n", "LinkSpeed takes a whole number"),
        ("Rack=r1\n", "expected SwitchName"),
        ("SwitchName=a Nodes=n[1-\n", "host list"),
        ("BlockName=b0 Nodes=n1\nBlockName=b1 Nodes=n1\n", "in two blocks"),
        ("BlockName=b0 Nodes=n[1-4]\nBlockSizes=4,12\n", "power-of-two"),
        ("BlockSizes=4\n", "without blocks"),
    ],
)
def test_invalid_topologies_are_refused_naming_the_culprit(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_topology_conf(text)


def test_unknown_nodes_are_reported_when_the_node_list_is_known() -> None:
    topo = parse_topology_conf(CONF)
    topo.check_nodes([f"tux{i}" for i in range(8)])
    with pytest.raises(TopologyError, match="1 unknown node") as err:
        topo.check_nodes([f"tux{i}" for i in range(7)])
    assert "tux7" in err.value.message


def test_toml_table_with_host_lists_and_level_names() -> None:
    topo = topology_from_table(
        {
            "level_names": ["leaf", "spine"],
            "switches": [
                {"name": "leaf0", "nodes": "n[00-15]"},
                {"name": "leaf1", "nodes": ["n[16-30]", "n31"]},
                {"name": "spine0", "switches": "leaf[0-1]", "link_speed": 400},
            ],
        }
    )
    assert topo.path_of("n31") == ("spine0", "leaf1")
    assert topo.level_of_name("spine") == 1
    assert [s.link_speed for s in topo.switches] == [1, 1, 400]


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"switchs": []}, "topology.switchs"),
        ({"switches": [{"nodes": "n1"}]}, "topology.switches[0]"),
        ({"switches": [{"name": "a", "ports": 4}]}, "topology.switches[0]"),
        ({"switches": [{"name": "a", "link_speed": True}]}, "topology.switches[0].link_speed"),
        ({"switches": [{"name": "a", "link_speed": -2}]}, "topology.switches[0].link_speed"),
        ({}, "topology.switches"),
        ({"level_names": "leaf"}, "topology.level_names"),
        ({"file": "x.conf", "switches": []}, "topology.file"),
    ],
)
def test_bad_toml_tables_name_the_field(table: dict[str, object], field: str) -> None:
    with pytest.raises(TopologyError) as err:
        topology_from_table(table)
    assert err.value.field == field


def test_config_reads_a_topology_conf_next_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text(CONF)
    (tmp_path / "hal.toml").write_text('[topology]\nfile = "topology.conf"\n')
    config = load_config(tmp_path / "hal.toml")
    assert config.topology is not None and config.topology.path_of("tux5") == ("s2", "s1")
    assert config_from_dict({}).topology is None
    with pytest.raises(TopologyError, match="cannot read topology file"):
        config_from_dict({"topology": {"file": "missing.conf"}}, base_dir=tmp_path)


def test_a_topology_conf_that_is_not_utf8_is_refused_not_a_crash(tmp_path: Path) -> None:
    """A Latin-1 comment in topology.conf raised UnicodeDecodeError out of the config
    loader: the server died with a traceback instead of a config error."""
    (tmp_path / "topology.conf").write_bytes(b"SwitchName=s0 Nodes=n[1-2]  # caf\xe9\n")
    (tmp_path / "hal.toml").write_text('[topology]\nfile = "topology.conf"\n')
    with pytest.raises(TopologyError, match="not UTF-8 text") as err:
        load_config(tmp_path / "hal.toml")
    assert err.value.field == "topology.file"
    assert str(tmp_path / "topology.conf") in err.value.message


def test_synthetic_tree_is_balanced_and_covers_every_node() -> None:
    names = [f"n{i}" for i in range(1000)]
    topo = synthetic_tree(names, leaf_size=16, levels=3)
    paths = topo.paths()
    assert set(paths) == set(names)
    assert {len(p) for p in paths.values()} == {3}
    leaves = [s for s in topo.switches if s.nodes]
    assert len(leaves) == 63 and max(len(s.nodes) for s in leaves) == 16
    assert paths["n0"][-1] == paths["n15"][-1] != paths["n16"][-1]


def test_switch_with_neither_nodes_nor_switches_is_an_empty_leaf() -> None:
    topo = Topology((Switch("lonely"),))
    assert topo.paths() == {} and topo.depth == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2", (2, None)), ("2@1:00:00", (2, 3600)), (" 1@30 ", (1, 1800)), ("4@0", (4, 0))],
)
def test_parse_switches(text: str, expected: tuple[int, int | None]) -> None:
    assert parse_switches(text) == expected


@pytest.mark.parametrize("text", ["0", "x", "2@", "2@abc", "-1", ""])
def test_parse_switches_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_switches(text)
    assert err.value.field == "switches"


def test_parse_topology() -> None:
    assert parse_topology("required=rack") == TopologyConstraint("rack", required=True)
    assert parse_topology("Preferred=leaf") == TopologyConstraint("leaf")
    assert str(parse_topology("required=spine")) == "required=spine"
    for bad in ("rack", "needed=rack", "required=", "required=a b"):
        with pytest.raises(InvalidRequest, match="required=LEVEL"):
            parse_topology(bad)


def test_a_level_named_nvlink_is_refused_at_start(tmp_path: Path) -> None:
    """``nvlink`` is reserved for NVLink (GPU islands, multi-node domains): a config
    naming a switch level so was accepted, and ``--topology required=nvlink`` then meant
    the GPUs' NVLink in PreFilter but that switch level in placement."""
    (tmp_path / "topology.conf").write_text(CONF)
    (tmp_path / "hal.toml").write_text(
        '[topology]\nfile = "topology.conf"\nlevel_names = ["leaf", "nvlink"]\n'
    )
    with pytest.raises(TopologyError, match="'nvlink' is reserved") as err:
        load_config(tmp_path / "hal.toml")
    assert err.value.field == "topology.level_names"
    with pytest.raises(TopologyError, match="reserved"):
        topology_from_table({"level_names": ["nvlink"], "switches": [{"name": "a", "nodes": "n1"}]})
