"""Preemption mode ``suspend`` in the live server, with a real agent and real processes.

One agent, 2 CPUs. A ``low`` job counting to a file fills it; a ``high`` job (whose QoS
lists ``low``) arrives: the low job is stopped (SIGSTOP), keeps its node and memory, the
high job runs on its CPUs and ends, and then the low job goes on where it stopped and,
let end by the test, completes: its counter file shows one run, without a gap in the
count. A victim whose preemptor is moved, before it starts, to a partition without the
victim's node goes on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hal.client.sync import HalClient
from hal.config.model import PartitionConfig
from hal.config.priority import priority_from_dict
from hal.core.errors import HalError
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType
from hal.scheduler.framework.snapshot import Plan
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.testing.live import LiveServer, stop_process, tree_stopped, wait_until
from hal.wire.jobs import JobSubmit

POLICY = priority_from_dict(
    {"qos": [{"name": "high", "priority": 100, "preempt": ["low"]}, {"name": "low"}]}
)
# grace time 30 s: suspend ignores it (Slurm does too)
PREEMPTION = PreemptionPolicy(PreemptType.QOS, PreemptMode.SUSPEND, grace_time_s=30)
# counts until the test lets it end (``_let_end``): however slow the machine, it is
# still running when its preemptor comes, and it ends only once it went on counting
COUNTER = """#!/bin/sh
echo "start $SLURM_RESTART_COUNT" >> "$PWD/count.$SLURM_JOB_ID"
i=0
while [ ! -e "$PWD/stop.$SLURM_JOB_ID" ]; do
  i=$((i + 1)); echo "$i" >> "$PWD/count.$SLURM_JOB_ID"; sleep 0.1
done
echo done >> "$PWD/count.$SLURM_JOB_ID"
"""


# "elsewhere" has no agent: a job moved there pends
PARTITIONS = (
    PartitionConfig(name="debug", default=True, nodes=("node1",)),
    PartitionConfig(name="elsewhere", nodes=("node9",)),
)
OVERRIDES = {
    "kill_wait_seconds": 2,
    "priority": POLICY,
    "preemption": PREEMPTION,
    "partitions": PARTITIONS,
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides=OVERRIDES)
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _let_end(count: Path) -> None:
    """Once the low job counts again after its suspension, let it end."""
    resumed_at = len(_lines(count))
    wait_until(lambda: len(_lines(count)) > resumed_at + 2, message="the low job counting on")
    (count.parent / count.name.replace("count.", "stop.")).touch()


@contextlib.contextmanager
def _ended(client: HalClient, tmp: Path) -> Iterator[Callable[[JobSubmit], int]]:
    """Submits jobs (the callable) and ends those left when the test does, passed or
    failed: a counter left running would hold the module's node for the next test."""
    submitted: list[int] = []

    def submit(job: JobSubmit) -> int:
        submitted.append(client.submit(job).job_id)
        return submitted[-1]

    try:
        yield submit
    finally:
        for job_id in submitted:
            (tmp / f"stop.{job_id}").touch()
            with contextlib.suppress(HalError):
                client.cancel(str(job_id))


def _submit(tmp: Path, qos: str, script: str) -> JobSubmit:
    return JobSubmit(
        script=script, workdir=str(tmp), time_limit_seconds=600, cpus_per_task=2, qos=qos
    )


def test_a_suspended_victim_goes_on_after_its_preemptor_ends(
    live: LiveServer, tmp_path: Path
) -> None:
    high_ends = tmp_path / "high.ends"
    high_script = f"#!/bin/sh\nwhile [ ! -e {high_ends} ]; do sleep 0.1; done\n"
    with live.client() as client, _ended(client, tmp_path) as submit:
        low = submit(_submit(tmp_path, "low", COUNTER))
        count = tmp_path / f"count.{low}"
        wait_until(lambda: len(_lines(count)) >= 6, message="the low job counting")
        high = submit(_submit(tmp_path, "high", high_script))
        wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the high job")
        info = client.job(low)
        assert info.state == "SUSPENDED" and info.nodes  # stopped, on its node
        out = live.cli("squeue", "-h", "-o", "%i %t")
        assert f"{low} S" in out.stdout.splitlines()
        # the server's SUSPENDED comes first; then its agent stops the processes
        shell, _ = live.wait_job_started("node1", low)
        wait_until(lambda: tree_stopped(shell), message="SIGSTOP on the node")
        frozen = len(_lines(count))
        time.sleep(1.5)
        assert len(_lines(count)) == frozen  # no progress while the high job runs
        high_ends.touch()
        wait_until(lambda: client.job(high).state == "COMPLETED", 30, message="the high job")
        _let_end(count)
        wait_until(lambda: client.job(low).state == "COMPLETED", 30, message="the low job")
        lines = _lines(count)
        # one run (not requeued), counting on from where it stopped to the end
        assert lines[0] == "start 0" and lines.count("start 0") == 1
        assert lines[1:-1] == [str(i) for i in range(1, len(lines) - 1)] and lines[-1] == "done"
        info = client.job(low)
        assert info.restarts == 0 and info.suspended_seconds > 1.5
        events = [(e.kind, e.data) for e in client.events(follow=False) if e.job_id == low]
        kinds = [k for k, _ in events]
        assert kinds.index("job.preempted") < kinds.index("job.resumed")
        preempted = next(d for k, d in events if k == "job.preempted")
        assert preempted == {"by": high, "mode": "suspend", "grace_s": 0.0}


def test_a_victim_goes_on_when_its_preemptor_is_moved_away(
    live: LiveServer, tmp_path: Path
) -> None:
    """The high job is moved to a partition without node1 (``scontrol update
    Partition=``) after its victim was stopped and before it started there: it will
    never take the victim's CPUs, so the victim goes on (as in Slurm, which never
    leaves a job suspended for a preemptor that does not run on its CPUs) instead of
    staying stopped for as long as the high job pends. The move is made as the
    preemption is applied (wrapping the scheduler's ``apply_plan``), the one moment
    the high job is pending with its victim stopped; the agent and processes are real."""
    cluster = getattr(live.server, "cluster", None)
    assert isinstance(cluster, Cluster)
    apply_plan = cluster.apply_plan

    async def preempt_then_move(plan: Plan, started: list[int] | None = None) -> list[int]:
        started = await apply_plan(plan, started)
        for p in plan.preemptions:
            await commands.update(
                cluster, str(p.by), Caller("admin", admin=True), partition="elsewhere"
            )
        return started

    cluster.apply_plan = preempt_then_move  # type: ignore[method-assign]
    try:
        with live.client() as client, _ended(client, tmp_path) as submit:
            low = submit(_submit(tmp_path, "low", COUNTER))
            count = tmp_path / f"count.{low}"
            wait_until(lambda: len(_lines(count)) >= 6, message="the low job counting")
            high = submit(_submit(tmp_path, "high", "#!/bin/sh\nsleep 3\n"))
            wait_until(lambda: client.job(high).partition == "elsewhere", message="the move")
            _let_end(count)
            wait_until(lambda: client.job(low).state == "COMPLETED", 30, message="the low job")
            lines = _lines(count)
            assert lines.count("start 0") == 1 and lines[-1] == "done"  # one run, resumed
            kinds = [e.kind for e in client.events(follow=False) if e.job_id == low]
            assert kinds.index("job.preempted") < kinds.index("job.resumed")
            assert client.job(high).state == "PENDING"
    finally:
        cluster.apply_plan = apply_plan  # type: ignore[method-assign]


def test_a_restarted_server_resumes_the_victim(tmp_path: Path) -> None:
    """The server stops while the low job is suspended and the high one runs; a new
    server on the same database (its marks are stored with the job) resumes the low job
    once the high one has ended, and it completes its one run."""
    data = tmp_path / "srv"
    first = LiveServer(data, config_overrides=OVERRIDES)
    first.start()
    agent = first.start_agent("node1", cpus=2, memory="1G")
    with first.client() as client:
        low = client.submit(_submit(tmp_path, "low", COUNTER)).job_id
        count = tmp_path / f"count.{low}"
        wait_until(lambda: len(_lines(count)) >= 6, message="the low job counting")
        high = client.submit(_submit(tmp_path, "high", "#!/bin/sh\nsleep 4\n")).job_id
        wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the high job")
        assert client.job(low).state == "SUSPENDED"
    first._agents.remove(agent)  # the agent (and both jobs) live through the restart
    first.stop()
    second = LiveServer(data, port=first.port, config_overrides=OVERRIDES)
    second.token = first.token
    second.start()
    try:
        with second.client() as client:
            wait_until(lambda: client.job(high).state == "COMPLETED", 60, message="the high job")
            _let_end(count)
            wait_until(lambda: client.job(low).state == "COMPLETED", 60, message="the low job")
            assert client.job(high).state == "COMPLETED"
            lines = _lines(count)
            assert lines.count("start 0") == 1 and lines[-1] == "done"
            assert client.job(low).restarts == 0
    finally:
        stop_process(agent)
        second.stop()
