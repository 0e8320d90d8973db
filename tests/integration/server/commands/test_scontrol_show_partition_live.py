"""``scontrol show partition`` against a live server: the server fills what the record
takes from hal.toml (PriorityJobFactor, PreemptMode from ``[preemption]``, DefaultTime as
configured), checked against Slurm 22.05.8 (docs/slurm-checks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.compat.commands import run
from hal.config.model import PartitionConfig
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType
from hal.testing.live import LiveServer

PARTITIONS = (
    PartitionConfig(name="debug", default=True, max_time_s=3600),
    PartitionConfig(name="other", default_time_s=600, priority_tier=2, priority_job_factor=7),
)


def test_show_partition_takes_its_keys_from_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A partition with MaxTime and no DefaultTime shows ``DefaultTime=NONE`` as Slurm's
    (HAL showed the MaxTime its jobs get); PriorityJobFactor and PreemptMode are the
    config's (HAL printed neither)."""
    preemption = PreemptionPolicy(type=PreemptType.PARTITION_PRIO, mode=PreemptMode.CANCEL)
    overrides: dict[str, object] = {"partitions": PARTITIONS, "preemption": preemption}
    with LiveServer(tmp_path, config_overrides=overrides) as live:
        monkeypatch.setenv("HAL_URL", live.url)
        monkeypatch.setenv("HAL_TOKEN", live.token)
        with live.agents(1, cpus=1):
            assert run("scontrol", ["show", "partition", "debug"]) == 0
            debug = capsys.readouterr().out.splitlines()
            assert "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO Hidden=NO" in debug
            assert "   OverTimeLimit=NONE PreemptMode=CANCEL" in debug
            assert run("scontrol", ["show", "partition", "other"]) == 0
            other = capsys.readouterr().out.splitlines()
            assert "   DefaultTime=00:10:00 DisableRootJobs=NO ExclusiveUser=NO Hidden=NO" in other
            assert (
                "   PriorityJobFactor=7 PriorityTier=2 RootOnly=NO ReqResv=NO OverSubscribe=NO"
                in other
            )
            assert run("sinfo", ["-h", "-o", "%P %L"]) == 0
            assert capsys.readouterr().out.splitlines() == ["debug* n/a", "other 10:00"]
