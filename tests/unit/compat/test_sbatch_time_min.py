"""``sbatch --time-min`` (``SBATCH_TIME_MIN``, ``#SBATCH --time-min``): the time limit
backfill may lower a job's ``--time`` to, in Slurm's time formats."""

from __future__ import annotations

import pytest

from hal.compat.sbatch import parse_sbatch
from hal.core.errors import InvalidRequest
from hal.wire.submit import JobSubmit


def submitted(*argv: str, env: dict[str, str] | None = None, script: str = "") -> JobSubmit:
    return parse_sbatch(
        list(argv),
        environ=env or {},
        cwd="/w",
        read_stdin=lambda: script or "#!/bin/sh\ntrue\n",
        now=0.0,
    ).job


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30", 1800), ("1:30:00", 5400), ("1-0", 86400), ("45:30", 2760), ("0", 0)],
)
def test_time_min_takes_the_formats_of_time(value: str, seconds: int) -> None:
    assert submitted(f"--time-min={value}", "-t", "2-0").time_min_seconds == seconds


def test_env_and_directive_give_way_to_the_command_line() -> None:
    """Slurm's precedence: command line > SBATCH_TIME_MIN > #SBATCH."""
    script = "#!/bin/sh\n#SBATCH --time-min=10\n#SBATCH -t 60\ntrue\n"
    assert submitted(script=script).time_min_seconds == 600
    env = {"SBATCH_TIME_MIN": "20"}
    assert submitted(env=env, script=script).time_min_seconds == 1200
    assert submitted("--time-min", "30", env=env, script=script).time_min_seconds == 1800


def test_a_time_min_longer_than_the_time_is_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"time-min.*longer than --time"):
        submitted("--time-min=2:00:00", "--time=1:00:00")


def test_without_time_the_server_judges_it() -> None:
    """No --time: the partition's default is the server's to know."""
    assert submitted("--time-min=2:00:00").time_min_seconds == 7200


@pytest.mark.parametrize("value", ["UNLIMITED", "abc", ""])
def test_a_time_min_that_is_no_duration_is_refused(value: str) -> None:
    with pytest.raises(InvalidRequest, match="--time-min"):
        submitted(f"--time-min={value}")
