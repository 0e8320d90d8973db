"""``--time-min`` as Slurm's commands show and change it: ``scontrol show job``'s
``TimeMin=``, ``scontrol update TimeMin=``, ``squeue -O MinTime`` and ``--json``."""

from __future__ import annotations

import json

from compat_fakes import FakeClient, call, job


def cluster() -> FakeClient:
    return FakeClient(
        job_list=[job(2, time_limit_seconds=7200, time_min_seconds=1800), job(3)],
    )


def test_show_job_prints_the_time_min_or_n_a() -> None:
    assert (
        "   RunTime=00:00:00 TimeLimit=02:00:00 TimeMin=00:30:00"
        in call(cluster(), "scontrol", "show", "job", "2").lines
    )
    assert (
        "   RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A"
        in call(cluster(), "scontrol", "show", "job", "3").lines
    )


def test_update_time_min_in_slurm_formats() -> None:
    client = cluster()
    assert call(client, "scontrol", "update", "JobId=2", "TimeMin=45").rc == 0
    assert call(client, "scontrol", "update", "job", "2", "TimeMin=0").rc == 0  # none
    assert [u.time_min_seconds for _, u in client.updates] == [2700, 0]


def test_update_refuses_an_unlimited_time_min() -> None:
    result = call(cluster(), "scontrol", "update", "JobId=2", "TimeMin=UNLIMITED")
    assert result.rc == 1
    assert "TimeMin cannot be unlimited" in result.err


def test_squeue_format_time_min() -> None:
    """Slurm 22.05.8's name is ``MinTime`` and its title ``TIME_MIN``
    (docs/slurm-checks.md); HAL's ``TimeMin`` (which Slurm refuses) stays an alias.
    HAL had only ``TimeMin``, titled ``MIN_TIME``."""
    lines = call(cluster(), "squeue", "-O", "JobID:4,MinTime:10,TimeLimit:.10").lines
    assert lines == [
        "JOBITIME_MIN  TIME_LIMIT",
        "2   30:00        2:00:00",
        "3   0:00       UNLIMITED",
    ]
    alias = call(cluster(), "squeue", "-h", "-O", "JobID:4,TimeMin:10,TimeLimit:.10").lines
    assert alias == lines[1:]


def test_squeue_json_time_minimum_in_minutes() -> None:
    data = json.loads(call(cluster(), "squeue", "--json").out)
    found = {j["job_id"]: j["time_minimum"]["number"] for j in data["jobs"]}
    assert found == {2: 30, 3: 0}
