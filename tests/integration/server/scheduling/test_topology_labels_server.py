"""Topology labels and multi-node NVLink domains on a real server with real agents:
agents started with --topology-label/--nvlink-domain (one rack from the config's
[[topology.labels]]), placement in one rack and one domain, a level the cluster lacks
refused at submit, ``hal topology show``, and the labels kept over a server restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hal.cli.topology import draw
from hal.core.errors import BadConstraints
from hal.core.topology import LabelRule, Topology
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

# Racks interleave the agents' names, so name order (node1, node2) spans both racks.
AGENTS = {
    "node1": ["--topology-label", "rack=r1", "--topology-label", "zone=z1"],
    "node2": ["--topology-label", "rack=r2", "--topology-label", "zone=z1"],
    "node3": ["--topology-label", "rack=r1", "--topology-label", "zone=z1"],
    # its rack comes from the server's config
    "node4": ["--topology-label", "zone=z1", "--nvlink-domain", "nvl0"],
}
RACK = {"node1": "r1", "node3": "r1", "node2": "r2", "node4": "r2"}
CONFIG = Topology(label_rules=(LabelRule(("node4",), (("rack", "r2"),)),))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(
        tmp_path_factory.mktemp("labels"), config_overrides={"topology": CONFIG}
    ) as srv:
        for name, extra in AGENTS.items():
            # node2 joins node4's NVLink domain
            more = ["--nvlink-domain", "nvl0"] if name == "node2" else []
            srv.start_agent(name, cpus=1, extra=[*extra, *more])
        with srv.client() as c:
            wait_until(
                lambda: set(AGENTS) <= {n.name for n in c.nodes() if n.state == "UP"},
                message="the labelled agents to register",
            )
        yield srv


def _run(server: LiveServer, **fields: object) -> list[str]:
    with server.client() as c:
        job = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", ntasks=2, **fields)  # type: ignore[arg-type]
        jid = c.submit(job).job_id
        wait_until(lambda: bool(c.job(jid).nodes), message="the job to be placed")
        nodes = c.job(jid).nodes
        wait_until(lambda: c.job(jid).state == "COMPLETED", message="the job to end")
    return nodes


def test_nodes_carry_agent_and_config_labels(server: LiveServer) -> None:
    with server.client() as c:
        nodes = {n.name: n for n in c.nodes()}
    assert nodes["node1"].topology_labels == {"rack": "r1", "zone": "z1"}
    assert nodes["node4"].topology_labels == {"rack": "r2", "zone": "z1"}
    assert (nodes["node4"].nvlink_domain, nodes["node1"].nvlink_domain) == ("nvl0", "")


def test_two_node_job_lands_in_one_rack(server: LiveServer) -> None:
    nodes = _run(server, nodes_min=2)
    assert len(nodes) == 2 and len({RACK[n] for n in nodes}) == 1


def test_required_nvlink_two_node_job_gets_the_domain(server: LiveServer) -> None:
    nodes = _run(server, nodes_min=2, topology="required=nvlink")
    assert sorted(nodes) == ["node2", "node4"]


def test_required_rack_is_accepted_and_a_missing_level_refused_at_submit(
    server: LiveServer,
) -> None:
    nodes = _run(server, nodes_min=2, topology="required=rack")
    assert len({RACK[n] for n in nodes}) == 1
    with server.client() as c, pytest.raises(BadConstraints, match="no 'site' level") as err:
        c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", topology="required=site"))
    assert "rack, zone, nvlink" in str(err.value)
    shown = server.cli("sbatch", "--topology", "required=region", "--wrap", "true")
    assert shown.returncode != 0 and "no 'region' level" in shown.stdout + shown.stderr


def test_topology_show_draws_labels_and_domains(server: LiveServer) -> None:
    with server.client() as c:
        info = c.topology()
    assert info.configured and info.labels_place and info.label_levels == ["rack", "zone"]
    zone = info.label_domains[0]
    assert (zone.level, zone.name, zone.nodes_total) == ("zone", "z1", 4)
    racks = {d.name: d.nodes for d in info.label_domains if d.level == "rack"}
    assert racks == {"r1": ["node1", "node3"], "r2": ["node2", "node4"]}
    assert [(d.name, d.nodes) for d in info.nvlink_domains] == [("nvl0", ["node2", "node4"])]
    text = draw(info)
    assert "labels (place jobs): rack, zone" in text
    assert "  rack r1" in text and "node[1,3]" in text
    assert "nvlink domain nvl0" in text
    shown = server.cli("topology", "show")
    assert shown.returncode == 0 and "rack r2" in shown.stdout


def test_labels_survive_a_server_restart(server: LiveServer) -> None:
    """Stop the agents and the server; the restarted server knows the labels and the
    domain from its database before any agent registers again."""
    server.stop()
    server.start()
    with server.client() as c:
        nodes = {n.name: n for n in c.nodes()}
        info = c.topology()
    assert nodes["node2"].topology_labels == {"rack": "r2", "zone": "z1"}
    assert nodes["node2"].nvlink_domain == "nvl0"
    assert {d.name for d in info.label_domains if d.level == "rack"} == {"r1", "r2"}
