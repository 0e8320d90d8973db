"""``scontrol update JobId=N`` of what Slurm users change in a pending job: StartTime,
Dependency, QOS, Account, Features, ExcNodeList, ReqNodeList and ArrayTaskThrottle,
read as sbatch reads --begin, -d, -C, -x and -w (the server checks them as at submit)."""

from __future__ import annotations

from datetime import datetime

import pytest
from compat_fakes import T0, FakeClient, call, job

from hal.wire.jobs import JobUpdate

NOW = T0 + 100


def updated(*words: str) -> JobUpdate:
    client = FakeClient(job_list=[job(7)])
    result = call(client, "scontrol", "update", "JobId=7", *words, now=NOW)
    assert result.rc == 0, result.err
    ((job_id, update),) = client.updates
    assert job_id == "7"
    return update


def test_start_time_as_sbatch_begin() -> None:
    assert updated("StartTime=now+1hour").begin_time == NOW + 3600
    assert updated("StartTime=now").begin_time == NOW
    assert updated("EligibleTime=now+60").begin_time == NOW + 60  # Slurm's other name
    christmas_eve = datetime(2026, 12, 24, 18, 0).timestamp()
    assert updated("StartTime=2026-12-24T18:00").begin_time == christmas_eve


def test_dependency_is_sent_as_written_and_empty_clears_it() -> None:
    assert updated("Dependency=afterok:5:6").dependency == "afterok:5:6"
    assert updated("Dependency=").dependency == ""


def test_qos_account_and_node_lists() -> None:
    update = updated("QOS=high", "Account=physics", "Features=ib&a100")
    assert (update.qos, update.account, update.constraint) == ("high", "physics", ["ib", "a100"])
    update = updated("ExcNodeList=n[1-2],n4", "ReqNodeList=n3")
    assert (update.exclude, update.nodelist) == (["n1", "n2", "n4"], ["n3"])
    cleared = updated("Features=", "ExcNodeList=", "ReqNodeList=")
    assert (cleared.constraint, cleared.exclude, cleared.nodelist) == ([], [], [])


def test_array_task_throttle() -> None:
    assert updated("ArrayTaskThrottle=3").array_max_running == 3
    assert updated("ArrayTaskThrottle=0").array_max_running == 0  # no limit


@pytest.mark.parametrize(
    ("word", "message"),
    [
        ("StartTime=someday", "invalid StartTime 'someday': write now, now+60"),
        ("Dependency=afterok", "afterok needs at least one job id"),
        ("Features=a|b", "HAL supports only features that must all be present"),
        ("ArrayTaskThrottle=-1", "ArrayTaskThrottle needs a count of 0 or more"),
        ("ArrayTaskThrottle=x", "ArrayTaskThrottle needs a count of 0 or more"),
        ("ReqNodeList=n[1-", "ReqNodeList"),
    ],
)
def test_bad_values_are_refused_before_the_server(word: str, message: str) -> None:
    client = FakeClient(job_list=[job(7)])
    result = call(client, "scontrol", "update", "JobId=7", word, now=NOW)
    assert result.rc == 1 and message in result.err, result.err
    assert client.updates == []


def test_the_unsupported_key_message_lists_the_new_keys() -> None:
    result = call(FakeClient(job_list=[job(7)]), "scontrol", "update", "JobId=7", "Gres=gpu:1")
    assert result.rc == 1
    for key in ("StartTime", "Dependency", "QOS", "Account", "Features", "ArrayTaskThrottle"):
        assert key in result.err
