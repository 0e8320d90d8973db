"""A job start's CPU in the server, end to end, in one process on a real PostgreSQL:
the control plane (``ControlPlane``: its scheduler, mirror, store, metrics, every
service) with no HTTP edge, N agents played by direct calls of the agent channel
(``hal.state.agents``: registration, then syncs that take launches, report them started,
and report them finished one round later), and M queued jobs of ``hal bench scale``'s
mix. Each round: every node syncs once, all together as agents' requests come (each
reply serialised as the route does), then the bench waits for the scheduler's next
cycle; the rounds stop early once no job is left pending (``rounds_run``: how many
ran). Prints one JSON object: starts, the process's CPU per start (the pass, the
plan's writes, the syncs and the end reports together; PostgreSQL's own CPU is another
process's and not counted), the rounds' wall time, the longest pass and the event
loop's longest lag::

    PYTHONPATH=src python bench/start_path.py [NODES [JOBS [ROUNDS]]]       # 200 4000 20
    PYTHONPATH=/path/to/other/tree/src python bench/start_path.py ...

``START_PATH_SYNCS=one_by_one``: each round's syncs one after another instead (no two
wait for the cluster's writer together: each commits its reports alone).

The learned predictor's one-time imports are made before the window opens.

Where the CPU goes: ``START_PATH_HOLD=3`` waits 3 s after the line "the window opens"
(stderr) for ``py-spy record --gil --pid`` to attach (py-spy: a dev extra).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hal.api.fastpath import json_response
from hal.bench.scale import PG_ADMIN, _database, _mix
from hal.config.model import load_config
from hal.core.job import JobSpec
from hal.core.states import JobState
from hal.server.control_plane import ControlPlane
from hal.state import agents
from hal.state.cluster import Caller, Cluster
from hal.wire.agent import AgentRegister, AgentSync, JobReport, Launch


class _Node:
    """One played agent: what it was told to launch, what it has running."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seq = 0
        self.applied: int | None = None
        self.running: dict[int, int] = {}  # job id: attempt
        self.new: list[tuple[int, int]] = []  # launched this round: reported started now

    async def sync(self, cluster: Cluster, now: float) -> None:
        """One sync: its reports in, the launches it is given taken."""
        sync = AgentSync(
            reports=self.reports(now),
            wait_seconds=0,
            running=list(self.running),
            applied=self.applied,
        )
        reply = await agents.sync(cluster, self.name, sync)
        json_response(reply)  # (its bytes, as the route sends them)
        for i, instruction in enumerate(reply.instructions):
            if isinstance(instruction, Launch) and instruction.job_id not in self.running:
                self.running[instruction.job_id] = instruction.attempt
                self.new.append((instruction.job_id, instruction.attempt))
            self.applied = reply.first_id + i

    def reports(self, now: float) -> list[JobReport]:
        out = []
        for job_id, attempt in self.new:
            self.seq += 1
            out.append(
                JobReport(seq=self.seq, job_id=job_id, attempt=attempt, kind="started", time=now)
            )
        ending = [j for j in self.running.items() if j not in self.new]
        for job_id, attempt in ending:  # one round's run: they end now
            self.seq += 1
            out.append(
                JobReport(
                    seq=self.seq,
                    job_id=job_id,
                    attempt=attempt,
                    kind="finished",
                    time=now,
                    state="COMPLETED",
                    cpu_seconds=1.0,
                    max_rss_bytes=1 << 20,
                )
            )
            del self.running[job_id]
        self.new = []
        return out


async def _run(db: str, nodes: int, jobs: int, rounds: int, work: Path) -> dict[str, object]:
    toml = work / "hal.toml"
    toml.write_text(
        "heartbeat_interval_seconds = 5\nnode_timeout_seconds = 600\n"
        "max_batch_jobs = 100000\n"
        f'[[partitions]]\nname = "bulk"\ndefault = true\nnodes = "emu[1-{nodes}]"\n'
    )
    config = load_config(toml)
    plane = ControlPlane(config, db, data_dir=work / "srv", config_path=toml)
    await plane.start()
    cluster = plane.cluster
    plane.service.paused = True  # nothing starts before every node is there
    played = [_Node(f"emu{i}") for i in range(1, nodes + 1)]
    for node in played:
        await agents.register(
            cluster, AgentRegister(node=node.name, cpus=16, memory_bytes=32 << 30)
        )
    specs = await _specs(plane, jobs)
    for start in range(0, len(specs), 1000):
        await cluster.submit(specs[start : start + 1000])
    warm_up = getattr(plane.predictions.predictor.inner, "warm_up", None)
    if callable(warm_up):  # its one-time imports (lightgbm, pandas: about a second of
        warm_up()  # CPU) before the window, not in it: they are not a start's
    passes = _time_passes(plane)
    print("start_path: the window opens", file=sys.stderr, flush=True)
    await asyncio.sleep(float(os.environ.get("START_PATH_HOLD", "0")))  # (a profiler attaches)
    started0 = plane.service.stats.total_started
    cycles0 = plane.service.stats.cycles
    longest = 0.0
    lag = plane.observe.loop_lag
    lag.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    plane.service.paused = False
    cluster.changed.set()
    together = os.environ.get("START_PATH_SYNCS", "together") == "together"
    rounds_run = 0
    while rounds_run < rounds and _pending(plane):
        cycles = plane.service.stats.cycles
        waited = 0
        while plane.service.stats.cycles == cycles:  # the next cycle has applied its plan
            await asyncio.sleep(0.005)
            waited += 1
            if waited % 40 == 0 and not _pending(plane):
                break  # (a pass that finds nothing pending counts no cycle)
        rounds_run += 1
        longest = max(longest, plane.service.stats.last_duration_s)
        now = cluster.clock.now()
        if together:
            await asyncio.gather(*(node.sync(cluster, now) for node in played))
        else:
            for node in played:
                await node.sync(cluster, now)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    starts = plane.service.stats.total_started - started0
    cycles = plane.service.stats.cycles - cycles0
    rest = cpu - passes[0]
    out: dict[str, object] = {
        "nodes": nodes,
        "jobs": jobs,
        "rounds": rounds,
        "rounds_run": rounds_run,  # fewer where no job was left pending
        "syncs": "together" if together else "one_by_one",
        "cycles": cycles,
        "starts": starts,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_start": round(1000 * cpu / max(starts, 1), 3),
        "starts_per_cpu_s": round(starts / cpu, 1),
        # the passes' decisions and forecasts (their worker thread's CPU), per cycle
        "pass_cpu_s": round(passes[0], 2),
        "pass_cpu_ms_per_cycle": round(1000 * passes[0] / max(cycles, 1), 2),
        # everything else (writing the plans, the syncs, the reports), per start
        "rest_cpu_ms_per_start": round(1000 * rest / max(starts, 1), 3),
        "longest_pass_s": round(longest, 3),
        # the event loop's longest lag in the window (``hal_event_loop_lag_seconds``):
        # the longest a request would have waited for it
        "event_loop_lag_max_s": round(lag.max_s, 3),
    }
    await plane.stop()
    return out


def _pending(plane: ControlPlane) -> bool:
    """Whether a job is left for a pass to start (none: the service runs no cycle, and
    its count of them stays where it is)."""
    return any(
        j.state is JobState.PENDING and not j.held for j in plane.cluster.unfinished.values()
    )


def _time_passes(plane: ControlPlane) -> list[float]:
    """The CPU the passes' worker thread spends deciding and forecasting, summed."""
    spent = [0.0]
    service = plane.service
    decide, forecast = service.decide, service.forecast

    def timed_decide(snap: Any) -> Any:
        t = time.thread_time()
        try:
            return decide(snap)
        finally:
            spent[0] += time.thread_time() - t

    def timed_forecast(plan: Any) -> Any:
        assert forecast is not None
        t = time.thread_time()
        try:
            return forecast(plan)
        finally:
            spent[0] += time.thread_time() - t

    service.decide = timed_decide
    if forecast is not None:
        service.forecast = timed_forecast
    return spent


async def _specs(plane: ControlPlane, jobs: int) -> list[JobSpec]:
    from hal.api.submit import submission

    caller = Caller("bench", admin=True)
    return list(await submission(plane.ctx, _mix(jobs, 16, 20.0), caller))


def main(nodes: int, jobs: int, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="hal-starts-") as tmp, _database(PG_ADMIN) as db:
        return asyncio.run(_run(db, nodes, jobs, rounds, Path(tmp)))


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(main(*(args + [200, 4000, 20][len(args) :]))))
