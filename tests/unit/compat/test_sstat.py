"""sstat: a running job's batch step usage, as its agent last sampled it."""

from __future__ import annotations

from compat_fakes import T0, FakeClient, MiB, call, job, running


def _client() -> FakeClient:
    sampled = running(
        5,
        nodes=["n1", "n2"],
        node_count=2,
        max_rss_bytes=300 * MiB + 4096,
        rss_bytes=200 * MiB,
        cpu_seconds=75.5,
        usage_time=T0 + 90,
    )
    fresh = running(6)  # started, no sample yet
    return FakeClient(job_list=[sampled, fresh, job(7, state="COMPLETED", end_time=T0)])


def test_default_fields_of_running_jobs() -> None:
    out = call(_client(), "sstat", "-j", "5,6")
    assert out.rc == 0, out.err
    assert out.lines == [
        "JobID            MaxRSS MaxRSSNode MaxRSSTask     AveRSS     MinCPU MinCPUNode "
        "MinCPUTask     AveCPU   NTasks ",
        "------------ ---------- ---------- ---------- ---------- ---------- ---------- "
        "---------- ---------- -------- ",
        "5.batch         307204K n1                  0    307204K  01:15.500 n1         "
        "         0  01:15.500        1 ",
        "6.batch                                                                        "
        "                             1 ",
    ]


def test_format_parsable_and_steps() -> None:
    lines = call(_client(), "sstat", "-P", "-n", "-o", "JobID,MaxRSS,AveCPU", "5.batch").lines
    assert lines == ["5.batch|307204K|01:15.500"]
    step = call(_client(), "sstat", "-j", "5.0")
    assert step.rc == 1 and "HAL runs one step per job, 5.batch" in step.err


def test_refusals() -> None:
    ended = call(_client(), "sstat", "-j", "7")
    assert ended.rc == 1 and "no running job among 7" in ended.err and "sacct" in ended.err
    unmeasured = call(_client(), "sstat", "-j", "5", "-o", "JobID,MaxVMSize")
    assert unmeasured.rc == 1 and 'Invalid field requested: "MaxVMSize"' in unmeasured.err
    assert call(_client(), "sstat").rc == 1  # no job named
    assert call(_client(), "sstat", "-j", "x1").rc == 1
