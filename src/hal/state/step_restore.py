"""Running job steps across a server restart (ADR 0012).

A step's tasks outlive the server (and their agents: ``hal.agent.steps``), so the server
keeps each running step in ``running_steps`` — its layout (each node's ranks where they
are not dealt in blocks), its job's attempt, the nodes whose part has ended (with what
their tasks used, their GPUs included, ``hal.state.step_usage``), whether srun runs
it on the batch node (``local``: no agent holds it, srun reports its end), when
scancel ended it (its kill is sent again to each agent that registers holding it), and
which ranks read srun's relayed stdin (``hal.state.step_input``) — and a restarted
server takes them up again (``StepTable.restore``) before any agent registers. Agents
registering again list the steps they still hold and keep them.

What a restart loses: the output the old server held unread (srun gets what the agents
send after it), and the cursor srun had, so a restored step numbers its output from a
base above any earlier server's (microseconds of the wall clock: a server hands out far
fewer than a million chunks a second), and takes each task's bytes from the first offset
an agent sends rather than from 0.
"""

from __future__ import annotations

import json

from hal.slurm.steps import StepLayout
from hal.state.step_usage import CpuTimes, GpuTotals, Totals
from hal.state.store import RunningStepRow


def running_row(
    job_id: int,
    step_id: int,
    attempt: int,
    name: str,
    layout: StepLayout,
    start_time: float,
    ended: dict[str, tuple[int, int]],
    oom: bool,
    local: bool = False,
    totals: Totals | None = None,
    gpus: GpuTotals | None = None,
    gpu_ids: dict[str, tuple[int, ...]] | None = None,
    cpus: dict[str, tuple[int, ...]] | None = None,
    srun: str = "",
    memory: dict[str, int] | None = None,
    cancelled_at: float | None = None,
    cancelled_by: str | None = None,
    times: CpuTimes | None = None,
    relay: dict[str, tuple[int, ...]] | None = None,
) -> RunningStepRow:
    """What ``running_steps`` keeps of a step (``oom``: a node's part ended for memory;
    kept with the first ended node, as the step's flag; ``local``: srun runs it on the
    batch node; ``totals``: what the ended nodes' tasks used, with each node's end;
    ``gpus``: those tasks' GPU use, where read, after it; ``gpu_ids``: the GPUs it holds
    on each node, where it asked for its own; ``cpus``: the job's CPUs it holds on each;
    ``srun``: a local step's srun process; ``memory``: the job's memory it holds on
    each, in bytes; ``cancelled_at``, ``cancelled_by``: when scancel ended it, for
    whom; ``times``: the ended tasks' user and system CPU seconds, where said, after
    their GPU use; ``relay``: each node's ranks that read srun's relayed stdin, None
    where srun relays none)."""
    used: dict[str, dict[str, list[float]]] = {node: {} for node in ended}
    on_gpus: dict[str, dict[str, list[float]]] = {node: {} for node in ended}
    parts: dict[str, dict[str, list[float]]] = {node: {} for node in ended}
    for rank, (node, rss, cpu) in (totals or {}).items():
        if node in used:
            used[node][str(rank)] = [rss, cpu]
            if gpus and rank in gpus:
                on_gpus[node][str(rank)] = list(gpus[rank])
            if times and rank in times:
                parts[node][str(rank)] = list(times[rank])
    return RunningStepRow(
        job_id=job_id,
        step_id=step_id,
        attempt=attempt,
        name=name,
        nodes=",".join(layout.nodes),
        tasks=_tasks_text(layout),
        start_time=start_time,
        ended=json.dumps(
            {
                node: [code, sig, oom, used[node], on_gpus[node], parts[node]]
                for node, (code, sig) in ended.items()
            }
        ),
        local=local,
        gpu_ids=json.dumps({node: list(ids) for node, ids in (gpu_ids or {}).items()}),
        cpus=json.dumps({node: list(held) for node, held in (cpus or {}).items()}),
        srun=srun,
        memory=json.dumps(memory or {}),
        cancelled_at=cancelled_at,
        cancelled_by=cancelled_by,
        relay="" if relay is None else json.dumps({n: list(r) for n, r in relay.items()}),
    )


def _tasks_text(layout: StepLayout) -> str:
    """``tasks``: each node's task count (ranks in blocks), or, for ranks dealt otherwise
    (``-m cyclic``...), ``ranks:`` and each node's ranks (``ranks:0 2,1``)."""
    if layout.rank_sets:
        return "ranks:" + ",".join(" ".join(map(str, r)) for r in layout.rank_sets)
    return ",".join(str(n) for n in layout.tasks)


def layout_of(row: RunningStepRow) -> StepLayout:
    nodes = tuple(row.nodes.split(","))
    if row.tasks.startswith("ranks:"):
        rank_sets = tuple(tuple(int(r) for r in part.split()) for part in row.tasks[6:].split(","))
        return StepLayout(nodes, tuple(len(r) for r in rank_sets), rank_sets)
    return StepLayout(nodes, tuple(int(n) for n in row.tasks.split(",")))


def ended_of(row: RunningStepRow) -> tuple[dict[str, tuple[int, int]], bool]:
    """The nodes' ends kept, and whether one of them was out of memory."""
    data: dict[str, list[int]] = json.loads(row.ended or "{}")
    ended = {node: (int(v[0]), int(v[1])) for node, v in data.items()}
    return ended, any(bool(v[2]) for v in data.values())


def totals_of(row: RunningStepRow) -> dict[int, tuple[str, int, float]]:
    """What the ended nodes' tasks used (``running_row``'s ``totals``; none from a
    server before step usage)."""
    data: dict[str, list[object]] = json.loads(row.ended or "{}")
    found: dict[int, tuple[str, int, float]] = {}
    for node, v in data.items():
        used = v[3] if len(v) > 3 and isinstance(v[3], dict) else {}
        for rank, (rss, cpu) in used.items():
            found[int(rank)] = (node, int(rss), float(cpu))
    return found


def gpus_of(row: RunningStepRow) -> dict[int, tuple[int, int, float]]:
    """The ended nodes' tasks' GPU use (``running_row``'s ``gpus``; none from a server
    before step GPU use)."""
    data: dict[str, list[object]] = json.loads(row.ended or "{}")
    found: dict[int, tuple[int, int, float]] = {}
    for v in data.values():
        used = v[4] if len(v) > 4 and isinstance(v[4], dict) else {}
        for rank, (mem, most, mean) in used.items():
            found[int(rank)] = (int(mem), int(most), float(mean))
    return found


def times_of(row: RunningStepRow) -> dict[int, tuple[float, float]]:
    """The ended nodes' tasks' user and system CPU seconds (``running_row``'s ``times``;
    none from a server before them)."""
    data: dict[str, list[object]] = json.loads(row.ended or "{}")
    found: dict[int, tuple[float, float]] = {}
    for v in data.values():
        parts = v[5] if len(v) > 5 and isinstance(v[5], dict) else {}
        for rank, (user, system) in parts.items():
            found[int(rank)] = (float(user), float(system))
    return found


def gpu_ids_of(row: RunningStepRow) -> dict[str, tuple[int, ...]]:
    """The GPUs the step holds on each node (``running_row``'s ``gpu_ids``)."""
    data: dict[str, list[int]] = json.loads(row.gpu_ids or "{}")
    return {node: tuple(int(i) for i in ids) for node, ids in data.items()}


def cpus_of(row: RunningStepRow) -> dict[str, tuple[int, ...]]:
    """The job's CPUs the step holds on each node, by their place among the job's there
    (``running_row``'s ``cpus``)."""
    data: dict[str, list[int]] = json.loads(row.cpus or "{}")
    return {node: tuple(int(c) for c in held) for node, held in data.items()}


def memory_of(row: RunningStepRow) -> dict[str, int]:
    """The job's memory the step holds on each node, in bytes (``running_row``'s
    ``memory``)."""
    data: dict[str, int] = json.loads(row.memory or "{}")
    return {node: int(size) for node, size in data.items()}


def relay_of(row: RunningStepRow) -> dict[str, tuple[int, ...]] | None:
    """Each node's ranks that read srun's relayed stdin (``running_row``'s ``relay``);
    None where srun relays none, or a server before migration 28 kept the step."""
    if not row.relay:
        return None
    data: dict[str, list[int]] = json.loads(row.relay)
    return {node: tuple(int(r) for r in ranks) for node, ranks in data.items()}


def cursor_base(now: float) -> int:
    """The first output cursor of a restored step: above any an earlier server gave."""
    return int(now * 1_000_000)
