"""``scontrol update`` of a pending job's StartTime, Dependency and ArrayTaskThrottle
takes effect in scheduling at once, through a real server and agent: a StartTime an
hour ahead keeps a job waiting on BeginTime even once its node is free, ``StartTime=now``
lets it start, a cleared Dependency lets a job start, a raised throttle lets more of an
array run. And ``scancel -b`` signals the batch shell only, as Slurm's does (it was
refused): SIGKILL without ``-s``, which also cancels a pending job. And the EligibleTime
a pending job shows: its begin time ahead, when it became eligible, or Unknown."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobInfo, JobSubmit

SLEEPER = "#!/bin/sh\nsleep 300\n"
QUICK = "#!/bin/sh\ntrue\n"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"kill_wait_seconds": 1})
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def submit(live: LiveServer, tmp_path: Path, script: str, **kw: Any) -> str:
    with live.client() as admin:
        return str(admin.submit(JobSubmit(script=script, workdir=str(tmp_path), **kw)).job_id)


def wait_for(live: LiveServer, job: str, what: str, check: Callable[[JobInfo], bool]) -> None:
    with live.client() as admin:
        wait_until(lambda: check(admin.job(job)), message=f"job {job} {what}")


def update(live: LiveServer, job: str, *words: str) -> None:
    out = live.cli("scontrol", "update", f"JobId={job}", *words)
    assert out.returncode == 0, out.stderr


def test_start_time_ahead_waits_on_begin_time_and_now_starts(
    live: LiveServer, tmp_path: Path
) -> None:
    blocker = submit(live, tmp_path, SLEEPER, cpus_per_task=2)
    wait_for(live, blocker, "running", lambda j: j.state == "RUNNING")
    job = submit(live, tmp_path, QUICK)
    wait_for(live, job, "waiting on the node", lambda j: j.reason in ("Resources", "Priority"))
    update(live, job, "StartTime=now+1hour")
    wait_for(live, job, "waiting on its begin time", lambda j: j.reason == "BeginTime")
    with live.client() as admin:
        admin.cancel(blocker)
        wait_until(lambda: admin.job(blocker).state == "CANCELLED", message="the blocker to end")
        assert admin.job(job).state == "PENDING"  # the node is free: its begin time holds it
    update(live, job, "StartTime=now")
    wait_for(live, job, "to run", lambda j: j.state == "COMPLETED")


def test_a_cleared_dependency_lets_the_job_start(live: LiveServer, tmp_path: Path) -> None:
    held = submit(live, tmp_path, QUICK, hold=True)
    job = submit(live, tmp_path, QUICK, dependency=f"afterok:{held}")
    wait_for(live, job, "waiting on its dependency", lambda j: j.reason == "Dependency")
    refused = live.cli("scontrol", "update", f"JobId={held}", f"Dependency=afterany:{job}")
    assert refused.returncode != 0 and "Circular job dependency" in refused.stderr
    update(live, job, "Dependency=")
    wait_for(live, job, "to run", lambda j: j.state == "COMPLETED")
    with live.client() as admin:
        assert admin.job(held).state == "PENDING"
        admin.cancel(held)


def test_a_raised_throttle_lets_more_of_the_array_run(live: LiveServer, tmp_path: Path) -> None:
    array = submit(live, tmp_path, SLEEPER, array="0-1%1")
    with live.client() as admin:

        def states() -> list[tuple[str, str]]:
            return sorted((j.state, j.reason) for j in admin.jobs(ids=[array]))

        wait_until(
            lambda: states() == [("PENDING", "JobArrayTaskLimit"), ("RUNNING", "None")],
            message="one element running, the other held back by %1",
        )
        update(live, f"{array}_1", "ArrayTaskThrottle=2")  # one element: the whole array's
        wait_until(
            lambda: [s for s, _ in states()] == ["RUNNING", "RUNNING"],
            message="both elements running",
        )
        admin.cancel(array)


def test_scancel_batch_signals_the_batch_shell_only(live: LiveServer, tmp_path: Path) -> None:
    """The shell traps USR1 and then ends its child with TERM: the child's status is
    TERM's (143) when USR1 reached the shell alone, USR1's (138) had the whole job been
    signalled."""
    script = (
        "#!/bin/bash\nsleep 300 &\nchild=$!\n"
        "trap 'kill -TERM $child; wait $child; echo \"child $?\"; exit 0' USR1\n"
        "echo ready\nwait\n"
    )
    job = submit(live, tmp_path, script)
    out = tmp_path / f"slurm-{job}.out"
    wait_until(lambda: out.exists() and "ready" in out.read_text(), message="the trap set")
    signalled = live.cli("scancel", "-b", "--signal=USR1", job)
    assert signalled.returncode == 0, signalled.stderr
    wait_for(live, job, "to end", lambda j: j.state == "COMPLETED")
    assert out.read_text().split() == ["ready", "child", "143"]


def test_scancel_batch_without_a_signal_kills(live: LiveServer, tmp_path: Path) -> None:
    """SIGKILL, as Slurm's scancel -b: a running job ends, a pending one is cancelled."""
    running = submit(live, tmp_path, SLEEPER)
    wait_for(live, running, "running", lambda j: j.state == "RUNNING")
    live.wait_job_started("node1", int(running))
    pending = submit(live, tmp_path, QUICK, begin_time=time.time() + 3600)
    for job in (running, pending):
        out = live.cli("scancel", "-b", job)
        assert out.returncode == 0, out.stderr
    wait_for(live, pending, "cancelled", lambda j: j.state == "CANCELLED")
    wait_for(live, running, "killed", lambda j: j.state not in ("RUNNING", "COMPLETING"))
    with live.client() as admin:
        assert admin.job(running).exit_signal == 9


def test_a_job_waiting_on_its_begin_time_shows_it_as_its_eligible_time(
    live: LiveServer, tmp_path: Path
) -> None:
    """Slurm shows a pending job's ``--begin`` still ahead as its EligibleTime (when it
    becomes eligible) in ``scontrol show job``, ``squeue -O EligibleTime`` and REST; HAL
    showed Unknown. A new ``StartTime=`` moves it."""
    from hal.compat.formats import timestamp

    begin = float(int(time.time()) + 3600)
    job = submit(live, tmp_path, QUICK, begin_time=begin)
    try:
        with live.client() as admin:
            assert admin.job(job).eligible_time == begin
        shown = live.cli("scontrol", "show", "job", job)
        assert f"EligibleTime={timestamp(begin)}" in shown.stdout, shown.stdout + shown.stderr
        queue = live.cli("squeue", "-h", "-j", job, "-O", "EligibleTime")
        assert queue.stdout.strip() == timestamp(begin), queue.stdout + queue.stderr
        update(live, job, f"StartTime={timestamp(begin + 3600)}")
        with live.client() as admin:
            assert admin.job(job).eligible_time == begin + 3600
    finally:
        with live.client() as admin:
            admin.cancel(job)


def test_a_held_job_whose_begin_time_is_ahead_shows_it_as_its_start_time(
    live: LiveServer, tmp_path: Path
) -> None:
    """Slurm 22.05.8 shows a held job's begin time ahead as its StartTime (scontrol) and
    squeue's %S; HAL showed Unknown and N/A (found in exploratory testing)."""
    from hal.compat.formats import timestamp

    begin = float(int(time.time()) + 3600)
    job = submit(live, tmp_path, QUICK, begin_time=begin, hold=True)
    try:
        shown = live.cli("scontrol", "show", "job", job).stdout
        assert f"StartTime={timestamp(begin)}" in shown, shown
        queue = live.cli("squeue", "-h", "-j", job, "-o", "%S")
        assert queue.stdout.strip() == timestamp(begin)
    finally:
        with live.client() as admin:
            admin.cancel(job)


def test_an_eligible_pending_job_shows_when_it_became_eligible(
    live: LiveServer, tmp_path: Path
) -> None:
    """Slurm shows a plain pending job's EligibleTime (its submit time) while it waits for
    a node, in ``scontrol show job`` and REST; HAL showed Unknown until it started. A held
    job, and one whose dependency is unmet, stay Unknown; released, a job is eligible from
    its release."""
    from hal.compat.formats import timestamp

    blocker = submit(live, tmp_path, SLEEPER, cpus_per_task=2)
    held = submit(live, tmp_path, QUICK, hold=True)
    waiting = submit(live, tmp_path, QUICK, dependency=f"afterok:{held}")
    plain = submit(live, tmp_path, QUICK)
    try:
        wait_for(live, plain, "waiting", lambda j: j.reason in ("Resources", "Priority"))
        wait_for(live, waiting, "waiting on its dependency", lambda j: j.reason == "Dependency")
        with live.client() as admin:
            submitted = admin.job(plain).submit_time
            assert admin.job(plain).eligible_time == submitted
            assert admin.job(held).eligible_time is None
            assert admin.job(waiting).eligible_time is None
        shown = live.cli("scontrol", "show", "job", plain)
        assert f"EligibleTime={timestamp(submitted)}" in shown.stdout, shown.stdout + shown.stderr
        shown = live.cli("scontrol", "show", "job", held)
        assert "EligibleTime=Unknown" in shown.stdout, shown.stdout + shown.stderr
        assert live.cli("scontrol", "release", held).returncode == 0
        with live.client() as admin:
            released = admin.job(held)
            assert released.eligible_time is not None
            assert released.eligible_time >= released.submit_time
    finally:
        with live.client() as admin:
            for job in (plain, waiting, held, blocker):
                admin.cancel(job)


def test_a_started_job_keeps_the_eligible_time_it_had_and_a_requeue_starts_anew(
    live: LiveServer, tmp_path: Path
) -> None:
    """Checked with Slurm 22.05.8 (docs/slurm-checks.md): a job eligible at its submission
    that waited for a node and then started shows EligibleTime=its submit time, not its
    start; ``scontrol requeue`` makes it eligible anew (Slurm: SubmitTime and EligibleTime
    move to the requeue, EligibleTime 121 s later, which HAL does not delay). HAL
    overwrote EligibleTime with the start time."""
    blocker = submit(live, tmp_path, SLEEPER, cpus_per_task=2)
    job = submit(live, tmp_path, SLEEPER)
    try:
        wait_for(live, job, "waiting", lambda j: j.reason in ("Resources", "Priority"))
        time.sleep(1.1)  # a start visibly after its submission
        with live.client() as admin:
            admin.cancel(blocker)
        wait_for(live, job, "running", lambda j: j.state == "RUNNING")
        with live.client() as admin:
            started = admin.job(job)
            assert started.start_time is not None
            assert started.start_time >= started.submit_time + 1
            assert started.eligible_time == started.submit_time
            time.sleep(1.1)
            before = time.time()
            admin.requeue(job)
        # (the node is free: it may have started again already, keeping that time)
        wait_for(live, job, "requeued", lambda j: j.restarts == 1)
        with live.client() as admin:
            again = admin.job(job)
            assert again.eligible_time is not None and again.eligible_time >= before - 0.01
    finally:
        with live.client() as admin:
            for one in (job, blocker):
                admin.cancel(one)


def test_requested_and_excluded_nodes_show_as_submitted_and_updated(
    live: LiveServer, tmp_path: Path
) -> None:
    """squeue's %n/%x and scontrol's ReqNodeList/ExcNodeList read the job's -w and -x
    through the server, after an update too (they were not shown at all)."""
    with live.client() as admin:
        (node,) = [n.name for n in admin.nodes()]
    job = submit(live, tmp_path, QUICK, hold=True, nodelist=[node])
    shown = live.cli("squeue", "-h", "-j", job, "-o", "%n|%x")
    assert shown.stdout.strip() == f"{node}|", shown.stderr
    update(live, job, "ReqNodeList=", f"ExcNodeList={node}")
    record = live.cli("scontrol", "show", "job", job).stdout
    assert f"ReqNodeList=(null) ExcNodeList={node}\n" in record
    assert "\n   NodeList=\n" in record and "BatchHost" not in record
    with live.client() as admin:
        admin.cancel(job)


def test_a_dependency_on_an_array_element_waits_for_that_element(
    live: LiveServer, tmp_path: Path
) -> None:
    """``sbatch -d afterok:A_0`` (HAL refused element ids; Slurm takes them): the job waits
    for element 0 alone (whose job id is the array's, which alone stands for all of
    them), shown as Slurm shows it; an element the array lacks is refused."""
    array = submit(live, tmp_path, QUICK, array="0-1", hold=True)
    sbatch = ("sbatch", "--parsable", "--wrap", "true")
    done = live.cli(*sbatch, "-d", f"afterok:{array}_0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    wait_for(live, job, "waiting on element 0", lambda j: j.reason == "Dependency")
    record = live.cli("scontrol", "show", "job", job).stdout
    assert f"Dependency=afterok:{array}_0(unfulfilled)\n" in record, record
    with live.client() as admin:
        admin.release(f"{array}_0")
    wait_for(live, job, "to run once element 0 has", lambda j: j.state == "COMPLETED")
    with live.client() as admin:
        assert admin.job(f"{array}_1").state == "PENDING"
        admin.cancel(array)
    missing = live.cli(*sbatch, "-d", f"afterok:{array}_7", cwd=tmp_path)
    assert missing.returncode != 0
    assert f"array job {array} has no element 7" in missing.stderr


def test_update_several_jobs_by_ids_or_name_and_relative_limits(
    live: LiveServer, tmp_path: Path
) -> None:
    """Slurm 22.05.8 (HAL refused each): ``update JobId=a,b`` updates both,
    ``update JobName=x ...`` every job named x, ``TimeLimit=+5``/``-2`` moves the limit,
    ``hold``/``release JobName=x`` act on the jobs named x; a bad Nice says which field,
    without pydantic's report."""
    a, b = (
        submit(live, tmp_path, SLEEPER, name="sel", hold=True, time_limit_seconds=300) for _ in "ab"
    )
    other = submit(live, tmp_path, SLEEPER, name="other", hold=True, time_limit_seconds=300)

    def limits() -> list[int]:
        with live.client() as admin:
            return [admin.job(j).time_limit_seconds for j in (a, b, other)]

    assert live.cli("scontrol", "update", f"JobId={a},{b}", "TimeLimit=7").returncode == 0
    assert limits() == [420, 420, 300]
    assert live.cli("scontrol", "update", "JobName=sel", "TimeLimit=6").returncode == 0
    assert limits() == [360, 360, 300]
    assert live.cli("scontrol", "update", f"JobId={a}", "TimeLimit=+5").returncode == 0
    assert live.cli("scontrol", "update", f"JobId={b}", "TimeLimit=-2").returncode == 0
    assert limits() == [660, 240, 300]
    assert live.cli("scontrol", "release", "JobName=sel").returncode == 0
    with live.client() as admin:
        assert [admin.job(j).priority > 0 for j in (a, b, other)] == [True, True, False]
    assert live.cli("scontrol", "hold", "JobName=sel").returncode == 0
    with live.client() as admin:
        assert [admin.job(j).priority for j in (a, b)] == [0, 0]
    bad = live.cli("scontrol", "update", f"JobId={a}", "Nice=20000")
    assert bad.returncode == 1 and "nice" in bad.stderr and "pydantic" not in bad.stderr
    live.cli("scancel", a, b, other)
