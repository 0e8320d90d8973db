"""A configured switch tree on a real server: node paths, placement on one leaf,
``GET /v1/topology``, ``hal topology show`` and ``scontrol show topology``, and the
--switches/--topology fields through REST."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hal.cli.topology import draw
from hal.slurm.topology_conf import parse_topology_conf
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

# Leaves interleave the agents' names, so name order (what a topology-unaware pick
# follows: node1, node2) spans both leaves.
TOPOLOGY = parse_topology_conf(
    "SwitchName=leaf0 Nodes=node[1,3]\n"
    "SwitchName=leaf1 Nodes=node[2,4]\n"
    "SwitchName=spine Switches=leaf[0-1] LinkSpeed=100\n",
    level_names=("leaf", "spine"),
)
LEAF = {"node1": "leaf0", "node3": "leaf0", "node2": "leaf1", "node4": "leaf1"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with (
        LiveServer(tmp_path_factory.mktemp("topo"), config_overrides={"topology": TOPOLOGY}) as srv,
        srv.agents(4, cpus=1),
    ):
        yield srv


def test_two_node_job_lands_on_one_leaf(server: LiveServer) -> None:
    with server.client() as c:
        job = JobSubmit(
            script="#!/bin/sh\ntrue\n", workdir="/tmp", nodes_min=2, ntasks=2, name="pair"
        )
        jid = c.submit(job).job_id
        wait_until(lambda: bool(c.job(jid).nodes), message="the job to be placed")
        nodes = c.job(jid).nodes
    assert len(nodes) == 2
    assert len({LEAF[n] for n in nodes}) == 1


def test_topology_endpoint_and_drawing(server: LiveServer) -> None:
    with server.client() as c:
        info = c.topology()
    assert info.configured and info.roots == ["spine"]
    assert info.level_names == ["leaf", "spine"]
    spine = next(s for s in info.switches if s.name == "spine")
    assert (spine.level, spine.nodes_total, spine.switches) == (1, 4, ["leaf0", "leaf1"])
    assert info.unplaced == [] and info.unregistered == []
    text = draw(info)
    assert text.splitlines()[0].startswith("spine")
    assert "  leaf0" in text and "node[1,3]" in text


def test_switches_and_topology_fields_round_trip_through_rest(server: LiveServer) -> None:
    with server.client() as c:
        job = JobSubmit(
            script="#!/bin/sh\ntrue\n",
            workdir="/tmp",
            hold=True,
            switches="1@10:00",
            topology="required=spine",
        )
        info = c.job(c.submit(job).job_id)
        c.cancel(info.id)
    assert (info.switches, info.switch_wait_seconds, info.topology) == (1, 600, "required=spine")


def test_explain_and_squeue_start_show_a_switches_wait(server: LiveServer) -> None:
    """Three nodes on one leaf cannot be had (leaves of two): the job waits for a better
    placement, and its expected start is the end of that wait."""
    with server.client() as c:
        job = JobSubmit(
            script="#!/bin/sh\ntrue\n", workdir="/tmp", nodes_min=3, ntasks=3, switches="1@2:00"
        )
        jid = c.submit(job).job_id
        try:
            wait_until(lambda: c.job(jid).reason == "Topology", message="the Topology wait")
            info = c.job(jid)
            detail = c.explain(jid).detail
            shown = server.cli("explain", str(jid)).stdout
        finally:
            c.cancel(jid)
    assert detail.startswith("waiting for a better placement: --switches=1: ")
    assert info.expected_start is not None  # what squeue --start shows
    assert 0 < info.expected_start - info.submit_time <= 120
    assert "(end of its --switches wait)" in shown


def test_scontrol_show_topology_prints_one_line_per_switch(server: LiveServer) -> None:
    """Slurm's format: leaves first as configured, an upper switch with every node
    below it and its child switches, LinkSpeed as topology.conf gave it (1 by default)."""
    out = server.cli("scontrol", "show", "topology")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.splitlines() == [
        "SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=node[1,3]",
        "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[2,4]",
        "SwitchName=spine Level=1 LinkSpeed=100 Nodes=node[1-4] Switches=leaf[0-1]",
    ]


def test_scontrol_show_topology_of_a_switch_or_nodes(server: LiveServer) -> None:
    """A switch name shows that switch; node names show every switch that connects all
    of them (a node's leaf and the switches above it); anything else is an error."""
    leaf = server.cli("scontrol", "show", "topology", "leaf1").stdout.splitlines()
    assert leaf == ["SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[2,4]"]
    node = server.cli("scontrol", "show", "topology", "node3").stdout.splitlines()
    assert [line.split()[0] for line in node] == ["SwitchName=leaf0", "SwitchName=spine"]
    both = server.cli("scontrol", "show", "topology", "node[1-2]").stdout.splitlines()
    assert [line.split()[0] for line in both] == ["SwitchName=spine"]
    out = server.cli("scontrol", "show", "topology", "nosuch")
    assert out.returncode == 1
    assert out.stderr == (
        "scontrol: error: Topology information contains no switch or node named nosuch\n"
    )
