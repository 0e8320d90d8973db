"""Time limits given with seconds, rounded up to whole minutes as Slurm 22.05.8 keeps them.

Checked on the real Slurm (``hal.bench.slurm_peer.SlurmCluster``): ``sbatch -t 5:30`` is
``TimeLimit=00:06:00`` (squeue ``%l`` ``6:00``), ``-t 0:0:30``, ``0:0:1``, ``0:59`` and
``SBATCH_TIMELIMIT=0:45`` are ``00:01:00``, ``-t 1-0:0:30`` is ``1-00:01:00``; ``--time-min
2:30`` is ``TimeMin=00:03:00`` (and ``-t 1:10 --time-min 1:20`` is taken: both are 2:00);
``salloc -t 1:30`` is ``00:02:00``; a step's ``srun -t 0:10`` is the step's
``TimeLimit=00:01:00``; ``scontrol update TimeLimit=3:30`` is ``00:04:00``,
``TimeLimit=+0:30`` adds a minute, ``-0:30`` takes one away, ``TimeMin=0:45`` is
``00:01:00``; a reservation's ``Duration=0:30`` is ``00:01:00``. HAL kept the seconds, so
a job could end up to 59 s before its Slurm twin."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, call, job
from test_reservation_scontrol import ResvClient

from hal.compat.salloc_options import parse_salloc
from hal.compat.sbatch import parse_sbatch
from hal.compat.srun import parse_command
from hal.core.errors import InvalidRequest
from hal.slurm.syntax import whole_minutes
from hal.wire.submit import JobSubmit


def submitted(*argv: str, env: dict[str, str] | None = None) -> JobSubmit:
    return parse_sbatch(
        list(argv), environ=env or {}, cwd="/w", read_stdin=lambda: "#!/bin/sh\ntrue\n", now=0.0
    ).job


@pytest.mark.parametrize(
    ("seconds", "rounded"), [(0, 0), (1, 60), (59, 60), (60, 60), (61, 120), (330, 360)]
)
def test_whole_minutes_rounds_up_and_keeps_no_limit(seconds: int, rounded: int) -> None:
    assert whole_minutes(seconds) == rounded


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        ("5:30", 360),
        ("0:0:30", 60),
        ("0:0:1", 60),
        ("0:59", 60),
        ("1-0:0:30", 86460),
        ("10", 600),
        ("0", 0),
        ("0:0:0", 0),
    ],
)
def test_sbatch_time_is_whole_minutes(given: str, seconds: int) -> None:
    assert submitted("-t", given).time_limit_seconds == seconds


def test_sbatch_time_from_the_environment_and_time_min_round_too() -> None:
    assert submitted(env={"SBATCH_TIMELIMIT": "0:45"}).time_limit_seconds == 60
    job = submitted("-t", "10:00", "--time-min", "2:30")
    assert (job.time_limit_seconds, job.time_min_seconds) == (600, 180)


def test_a_time_min_longer_only_in_seconds_is_taken() -> None:
    """Slurm takes ``-t 1:10 --time-min 1:20`` (both 2:00) and refuses ``--time-min 2:01``."""
    job = submitted("-t", "1:10", "--time-min", "1:20")
    assert (job.time_limit_seconds, job.time_min_seconds) == (120, 120)
    with pytest.raises(InvalidRequest, match="longer than --time"):
        submitted("-t", "1:10", "--time-min", "2:01")


def test_salloc_time_is_whole_minutes() -> None:
    request = parse_salloc(["-t", "1:30", "true"], environ={}, cwd="/w", now=0.0)
    assert request.job.time_limit_seconds == 120


def test_a_steps_time_is_whole_minutes() -> None:
    assert parse_command(["-t", "0:10", "true"], {}).request.time_limit_s == 60
    assert parse_command(["-t", "1:00:30", "true"], {}).request.time_limit_s == 3660


def limited() -> FakeClient:
    return FakeClient(job_list=[job(2, time_limit_seconds=240)])


@pytest.mark.parametrize(
    ("word", "seconds"),
    [
        ("TimeLimit=3:30", 210 + 30),
        ("TimeLimit=0:0:5", 60),
        ("TimeLimit=+0:30", 240 + 60),
        ("TimeLimit=+0:0:1", 240 + 60),
        ("TimeLimit=-0:30", 240 - 60),
    ],
)
def test_scontrol_update_time_limit_is_whole_minutes(word: str, seconds: int) -> None:
    client = limited()
    done = call(client, "scontrol", "update", "JobId=2", word)
    assert done.rc == 0, done.err
    assert client.updates[-1][1].time_limit_seconds == seconds


def test_scontrol_update_time_min_is_whole_minutes() -> None:
    client = limited()
    assert call(client, "scontrol", "update", "JobId=2", "TimeMin=0:45").rc == 0
    assert client.updates[-1][1].time_min_seconds == 60


def test_a_reservations_duration_is_whole_minutes() -> None:
    client = ResvClient()
    done = call(
        client, "scontrol", "create", "reservation", "ReservationName=r1",
        "StartTime=now+1hour", "Duration=0:30", "Users=alice", "Nodes=node1", now=T0,
    )  # fmt: skip
    assert done.rc == 0, done.err
    assert client.made[0].duration_seconds == 60


def test_hal_exact_time_limits_keeps_the_seconds() -> None:
    """HAL's own opt-out (``HAL_EXACT_TIME_LIMITS=1``), for tests that wait out a limit."""
    exact = {"HAL_EXACT_TIME_LIMITS": "1"}
    assert submitted("-t", "0:05", env=exact).time_limit_seconds == 5
    assert parse_command(["-t", "0:02", "true"], exact).request.time_limit_s == 2
    client = limited()
    assert call(client, "scontrol", "update", "JobId=2", "TimeLimit=0:03", environ=exact).rc == 0
    assert client.updates[-1][1].time_limit_seconds == 3
