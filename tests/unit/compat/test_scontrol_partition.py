"""``scontrol update PartitionName=P ...`` read as Slurm 22.05.8 reads it (docs/
slurm-checks.md): keys and States in any case, a State abbreviated; what HAL
reads otherwise is refused with what to write."""

from __future__ import annotations

import pytest

from hal.compat.scontrol_partition import is_partition_update, parse_update
from hal.core.errors import InvalidRequest, UnsupportedOption

ENV = {"HAL_EXACT_TIME_LIMITS": ""}


@pytest.mark.parametrize(
    ("words", "fields"),
    [
        (["State=down"], {"state": "DOWN"}),
        (["state=d"], {"state": "DOWN"}),  # Slurm's order: d is DOWN, not DRAIN
        (["STATE=dra"], {"state": "DRAIN"}),
        (["State=Inact"], {"state": "INACTIVE"}),
        (["MaxTime=60", "DefaultTime=5"], {"max_time_seconds": 3600, "default_time_seconds": 300}),
        (["maxtime=1-00:00:00"], {"max_time_seconds": 86400}),
        (["MaxTime=UNLIMITED", "maxnodes=infinite"], {"max_time_seconds": 0, "max_nodes": 0}),
        (
            ["MaxNodes=2", "PriorityJobFactor=5", "PriorityTier=3"],
            {"max_nodes": 2, "priority_job_factor": 5, "priority_tier": 3},
        ),
        (["Default=yes"], {"default": True}),
        (["default=NO"], {"default": False}),
    ],
)
def test_reads_keys_as_slurm(words: list[str], fields: dict[str, object]) -> None:
    name, change = parse_update(["PartitionName=debug", *words], ENV)
    assert name == "debug"
    assert change.model_dump(exclude_none=True) == fields


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["State=foo"], "Acceptable State values are UP, DOWN, DRAIN and INACTIVE"),
        (["State="], "Acceptable State values"),
        (["MaxTime=abc"], "MaxTime"),
        (["MaxTime=0"], "write MaxTime=UNLIMITED"),
        (["DefaultTime=0"], "write DefaultTime=UNLIMITED"),
        (["MaxNodes=abc"], 'Invalid numeric value "abc" for MaxNodes'),
        (["MaxNodes=0"], "MaxNodes=UNLIMITED"),
        (["PriorityJobFactor=65534"], "Invalid PriorityJobFactor value: 65534"),
        (["PriorityTier=-1"], "Invalid PriorityTier value: -1"),
        (["Default=maybe"], "write Default=YES or Default=NO"),
        ([], "No changes specified"),
        (["oops"], "write Key=Value"),
    ],
)
def test_bad_values_say_what_to_write(words: list[str], said: str) -> None:
    with pytest.raises(InvalidRequest, match=said.replace("(", r"\(")):
        parse_update(["PartitionName=debug", *words], ENV)


def test_keys_hal_leaves_to_hal_toml() -> None:
    with pytest.raises(UnsupportedOption, match=r"hal.toml's \[\[partitions\]\]"):
        parse_update(["PartitionName=debug", "Nodes=n[1-2]"], ENV)


def test_which_updates_are_partition_updates() -> None:
    assert is_partition_update(["PartitionName=debug", "State=UP"])
    assert is_partition_update(["partition=debug", "state=up"])  # Slurm takes it
    assert not is_partition_update(["JobId=3", "Partition=debug"])
    assert not is_partition_update([])
