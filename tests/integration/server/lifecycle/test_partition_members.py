"""A partition whose configured nodes have not registered (a `nodes = "n[1-2]"` copied
from the docs while `hal up` names its agents node1, node2) holds no node: sinfo and
scontrol show it empty, as the scheduler sees it, not holding every node."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.config.model import PartitionConfig
from hal.testing.live import LiveServer

PARTITIONS = (
    PartitionConfig(name="debug", default=True),  # every node
    PartitionConfig(name="batch", nodes=("n1", "n2")),  # none of them registers
)


def test_a_partition_of_unregistered_nodes_shows_no_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with LiveServer(tmp_path, config_overrides={"partitions": PARTITIONS}) as live:
        monkeypatch.setenv("HAL_URL", live.url)
        monkeypatch.setenv("HAL_TOKEN", live.token)
        with live.agents(1, cpus=1):
            assert run("sinfo", ["-h", "-o", "%P %D %N"]) == 0
            assert capsys.readouterr().out.splitlines() == ["debug* 1 node1", "batch 0 "]
            assert run("scontrol", ["show", "partition", "batch"]) == 0
            out = capsys.readouterr().out
            assert "Nodes=(null)" in out and "TotalCPUs=0 TotalNodes=0" in out
            with live.client() as client:
                batch = next(p for p in client.partitions() if p.name == "batch")
            assert batch.nodes == []
