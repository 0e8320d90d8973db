"""Job steps: which of a job's nodes run a step's tasks, and which ranks each runs.

``srun`` inside a job asks for a step (``-N``, ``-n``, ``--ntasks-per-node``, ``-w``);
``step_layout`` answers with the step's nodes and tasks per node, or refuses with what
Slurm's srun would say ("Unable to create step ..."). Both srun (to tell a step that
stays on the batch node from one that needs the control plane) and the server (which
decides) call it. Ranks are dealt in blocks, Slurm's default distribution (node 0 runs
ranks 0..k-1, node 1 the next, and so on), or as ``-m`` says (``hal.slurm.distribution``):
cyclic and block put as many tasks on each node, plane=S and arbitrary decide the counts
too.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import hostlist

from hal.core.errors import InvalidRequest
from hal.core.states import JobState
from hal.slurm.distribution import Distribution, deal
from hal.slurm.syntax import compress_indices

DEFAULT_DISTRIBUTION = Distribution()  # srun's, without -m
EXEC_FAILED = 2  # a task that could not start, as Slurm's srun reports it (srun and agents)
# A job or step the cgroup killed for memory ends as Slurm's do: ExitCode 0:125 (its
# SIG_OOM, 253, read as a wait status), whatever the script's own exit code was.
OOM_SIGNAL = 125


def worst_exit(codes: Iterable[int]) -> tuple[int, int]:
    """The worst of tasks' exit codes (-N for a signal N), as srun exits with it: the
    highest code, 128+N for a signal N (a signal before an equal exit code), and that
    signal (0: the task exited)."""
    worst = max(codes, key=lambda c: (c if c >= 0 else 128 - c, max(-c, 0)))
    return (worst if worst >= 0 else 128 - worst), max(0, -worst)


def task_errors(node: str, codes: Mapping[int, int], *, oom: bool = False) -> list[str]:
    """srun's lines for the tasks of ``node`` that did not exit 0 (``codes``: rank →
    exit code, -N for a signal N), grouped as Slurm 22.05.8's srun prints them
    (docs/slurm-checks.md): ``srun: error: n1: task 0: Exited with exit code 2``,
    ``srun: error: n1: tasks 0-3: Killed``, "Out Of Memory" for a task SIGKILLed where
    the step's cgroup counted an OOM kill (``oom``)."""
    ranks: dict[str, list[int]] = {}
    for rank, code in sorted(codes.items()):
        if code > 0:
            why = f"Exited with exit code {code}"
        elif code < 0:
            why = "Out Of Memory" if oom and code == -signal.SIGKILL else signal_text(-code)
        else:
            continue
        ranks.setdefault(why, []).append(rank)
    return [
        f"srun: error: {node}: task{'s' if len(r) > 1 else ''} {compress_indices(r)}: {why}"
        for why, r in ranks.items()
    ]


def signal_text(signum: int) -> str:
    """``strsignal``'s words for a signal ("Killed", "Segmentation fault"), as srun's."""
    try:
        return signal.strsignal(signum) or f"Signal {signum}"
    except ValueError:
        return f"Signal {signum}"


def oom_message(node: str, kills: int, step: str) -> str:
    """slurmstepd's line in the output of a step (``JOB.batch``, ``JOB.N``) that had
    processes killed for memory (Slurm 22.05.8 with cgroup v1, docs/slurm-checks.md)."""
    return (
        f"slurmstepd-{node}: error: Detected {kills} oom-kill event(s) in StepId={step}. "
        "Some of your processes may have been killed by the cgroup out-of-memory handler."
    )


def cancelled_message(
    node: str, job_id: int | str, when: str, why: str = "", kind: str = "JOB"
) -> str:
    """slurmstepd's line in the output of a job (or, ``kind`` "STEP", a step ``J.S``) it
    ends (Slurm 22.05.8, docs/slurm-checks.md): ``when`` as ``2026-11-26T22:42:26``
    (``stamp``), ``why`` e.g. ``DUE TO TIME LIMIT`` ("" for a cancel)."""
    because = f" {why}" if why else ""
    return (
        f"slurmstepd-{node}: error: *** {kind} {job_id} ON {node} CANCELLED AT {when}{because} ***"
    )


def stamp(when: float) -> str:
    """A time as slurmstepd's lines write it, local: ``2026-11-26T22:42:26``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(when))


# srun's line when scancel ends its step (Slurm 22.05.8, docs/slurm-checks.md)
FORCING_TERMINATION = "srun: forcing job termination"  # srun's, when its job is cancelled


def step_aborted(kill_wait: int) -> str:
    """srun's line for a step scancel or its job's end is ending (Slurm 22.05.8 waits
    KillWait + 2 s: "32 seconds" with the default 30)."""
    return f"srun: Job step aborted: Waiting up to {kill_wait + 2} seconds for job step to finish."


TIME_LIMIT = "DUE TO TIME LIMIT"  # slurmstepd's reason for a step (or job) past its limit
# the job states slurmstepd's "*** JOB (and STEP) ... CANCELLED AT ... ***" lines are
# written for, with their reason
ENDED_SAYING = {JobState.CANCELLED: "", JobState.TIMEOUT: TIME_LIMIT}


def force_terminated(step: str) -> str:
    """srun's last line for a step ended at its own time limit (``srun -t``), or by a
    task's failure (``srun -K``)."""
    return f"srun: Force Terminated StepId={step}"


def terminating(step: str) -> str:
    """srun -K's line once a task of step ``J.S`` has failed, before the others are ended
    (Slurm 22.05.8)."""
    return f"srun: launch/slurm: _step_signal: Terminating StepId={step}"


INHERITED_RSS_MARGIN = 1 << 20


@dataclass(frozen=True, slots=True)
class StepRequest:
    """What srun asked for; None: not given (the job's own values apply)."""

    nodes: int | None = None  # -N
    ntasks: int | None = None  # -n
    ntasks_per_node: int | None = None  # --ntasks-per-node
    nodelist: tuple[str, ...] = ()  # -w, expanded (-m arbitrary: a name per task)
    distribution: Distribution = DEFAULT_DISTRIBUTION  # -m
    gpus: int | None = None  # --gpus: the step's GPUs in all
    gpus_per_node: int | None = None  # --gpus-per-node, --gres=gpu:N
    gpus_per_task: int | None = None  # --gpus-per-task
    cpus_per_task: int | None = None  # -c (or SRUN_CPUS_PER_TASK): implies --exact
    exact: bool = False  # --exact, --exclusive: only the CPUs its tasks ask for
    overlap: bool = False  # --overlap: shares the CPUs other steps hold
    mem_per_node: int | None = None  # --mem, bytes (0: all the job's there)
    mem_per_cpu: int | None = None  # --mem-per-cpu, bytes
    time_limit_s: int = 0  # -t: the step's own time limit (0: the job's alone)

    @property
    def asks_gpus(self) -> bool:
        """Whether the step asks for GPUs of its own (``--gpus=0`` too: none)."""
        return any(n is not None for n in (self.gpus, self.gpus_per_node, self.gpus_per_task))


class LocalStep(NamedTuple):
    """A step srun runs on the batch node, as the control plane recorded it (srun's
    view of ``StepInfo``)."""

    step_id: int
    cpus: tuple[int, ...]  # the places among the job's CPUs there it holds (() all)
    memory_bytes: int  # its memory there, its cgroup's limit (0: the job's)


@dataclass(frozen=True, slots=True)
class StepLayout:
    nodes: tuple[str, ...]  # in the job's node order
    tasks: tuple[int, ...]  # tasks on each node, same order
    # each node's ranks, when not dealt in blocks (-m cyclic, plane, arbitrary)
    rank_sets: tuple[tuple[int, ...], ...] = ()
    distribution: str = ""  # SLURM_DISTRIBUTION ("": srun's default, block)
    plane_size: int = 0  # SLURM_DIST_PLANESIZE (-m plane=S)

    @property
    def ntasks(self) -> int:
        return sum(self.tasks)

    def ranks(self, index: int) -> Sequence[int]:
        """The global ranks (``SLURM_PROCID``) of node ``index``'s tasks."""
        if self.rank_sets:
            return self.rank_sets[index]
        first = sum(self.tasks[:index])
        return range(first, first + self.tasks[index])

    def tasks_per_node(self) -> str:
        """``SLURM_STEP_TASKS_PER_NODE``: ``2(x3),1`` as Slurm writes runs of equal counts."""
        return per_node_counts(self.tasks)


def step_environment(step_id: int | None, layout: StepLayout) -> dict[str, str]:
    """The step's variables for its tasks, as srun sets them: its id, ``SLURM_STEP_*``,
    and the step's counts, nodes and tasks per node in place of the job's (``SLURM_NTASKS``
    ...), its distribution. One set for a step srun runs on the batch node
    (``hal.compat.local_step``) and one the agents run (``hal.state.steps``); ``step_id``
    None: srun could not reach the server to number the step. Each task adds its own
    ``SLURM_PROCID``, ``SLURM_LOCALID`` and node's."""
    nodelist = hostlist.collect_hostlist(list(layout.nodes))
    per_node = layout.tasks_per_node()
    values = {} if step_id is None else {"SLURM_STEP_ID": str(step_id)}
    if step_id is not None:
        values["SLURM_STEPID"] = str(step_id)
    values |= {
        "SLURM_STEP_NUM_TASKS": str(layout.ntasks),
        "SLURM_STEP_NUM_NODES": str(len(layout.nodes)),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "SLURM_NTASKS": str(layout.ntasks),
        "SLURM_NPROCS": str(layout.ntasks),
        "SLURM_NNODES": str(len(layout.nodes)),
        "SLURM_NODELIST": nodelist,
        "SLURM_TASKS_PER_NODE": per_node,
        "SLURM_DISTRIBUTION": layout.distribution or "block",
    }
    if layout.plane_size:
        values["SLURM_DIST_PLANESIZE"] = str(layout.plane_size)
    return values


def per_node_counts(counts: Iterable[int]) -> str:
    """Counts per node as Slurm writes them (``SLURM_TASKS_PER_NODE``,
    ``SLURM_JOB_CPUS_PER_NODE``): a run of equal counts ``N(xK)``, ``2(x3),1``."""
    runs: list[tuple[int, int]] = []
    for n in counts:
        if runs and runs[-1][0] == n:
            runs[-1] = (n, runs[-1][1] + 1)
        else:
            runs.append((n, 1))
    return ",".join(f"{n}(x{k})" if k > 1 else str(n) for n, k in runs)


def tasks_per_node(ntasks: int, ntasks_per_node: int | None, nodes: int) -> str:
    """``SLURM_TASKS_PER_NODE``: the tasks of each node in node-list order, a run of equal
    counts written ``N(xK)`` as Slurm does (``2(x3),1``: three nodes of two, then one of
    one). ``--ntasks-per-node`` gives every node that many; else the tasks are spread
    evenly, the first nodes one more when they do not divide (``-N 2 -n 3``: ``2,1``), as
    the CPUs given per node are (``JobSpec.cpus_per_node``, rounded up)."""
    if ntasks_per_node:
        return per_node_counts([ntasks_per_node] * nodes)
    if ntasks < nodes:
        return per_node_counts([1] * nodes)  # (fewer tasks than nodes: one CPU's worth on each)
    q, r = divmod(ntasks, nodes)
    return per_node_counts([q + 1] * r + [q] * (nodes - r))


def refused(job_id: int, why: str) -> InvalidRequest:
    return InvalidRequest(f"Unable to create step for job {job_id}: {why}")


BUSY = "step_busy"  # the field of a step refused for now: the CPUs or GPUs it needs are held


def step_cpu_asks(
    request: StepRequest, layout: StepLayout, job_cpus: Sequence[int]
) -> tuple[int, ...]:
    """The CPUs a step is given on each of its nodes (``job_cpus``: the job's CPUs there,
    in the step's node order), as Slurm 22.05's steps are: all the job's CPUs on the node
    by default, only its tasks' (``-c`` each, else one) with ``--exact``, ``--exclusive``
    or ``-c``; with ``--overlap`` too (scontrol show step counts them), though it holds
    none of them (``step_cpu_counts``)."""
    if not (request.exact or request.cpus_per_task is not None):
        return tuple(job_cpus)
    per_task = request.cpus_per_task or 1
    return tuple(n * per_task for n in layout.tasks)


def step_cpu_counts(
    request: StepRequest, layout: StepLayout, job_cpus: Sequence[int]
) -> tuple[int, ...] | None:
    """The CPUs a step holds on each of its nodes while it runs (``step_cpu_asks``); None
    with ``--overlap``, which holds none and waits for none (docs/slurm-checks.md, "Steps
    wait for the CPUs other steps hold")."""
    return None if request.overlap else step_cpu_asks(request, layout, job_cpus)


def step_memory_asks(
    request: StepRequest,
    cpu_asks: Sequence[int],
    job_memory: Sequence[int],
    job_mem_per_cpu: int | None,
) -> tuple[int, ...]:
    """The memory a step is given on each of its nodes, in bytes (``cpu_asks``: its CPUs
    there, ``step_cpu_asks``; ``job_memory``: the job's memory there), as Slurm 22.05.8
    gives it with memory a consumable resource (docs/slurm-checks.md, "Steps hold their
    job's memory"): ``--mem`` on each node (0: all the job's, though it holds none of
    it), ``--mem-per-cpu`` for each of its CPUs; without either, the job's
    ``--mem-per-cpu`` for each of its CPUs, else all the job's memory there."""
    per_cpu = request.mem_per_cpu
    if request.mem_per_node is not None:
        if request.mem_per_node:
            return (request.mem_per_node,) * len(job_memory)
        return tuple(job_memory)
    if per_cpu is None and job_mem_per_cpu is not None:
        per_cpu = job_mem_per_cpu
    if per_cpu is not None:
        return tuple(per_cpu * n for n in cpu_asks)
    return tuple(job_memory)


def step_gpu_counts(
    request: StepRequest, layout: StepLayout, job_gpus: Sequence[int] = ()
) -> tuple[int, ...] | None:
    """The GPUs a step holds on each of its nodes (``job_gpus``: the job's GPU count
    there, in the step's node order). ``--gpus=N`` is spread evenly over the step's
    nodes, the first ones one more where it does not divide. A step without a GPU option
    holds all the job's GPUs there, as Slurm 22.05.8's does (a second such step, or one
    with ``--gpus``, waits for them: docs/slurm-checks.md, "srun steps with GPUs of their
    own"); None where it holds none: with ``--overlap``, or in a job without GPUs."""
    if request.gpus_per_task is not None:
        return tuple(request.gpus_per_task * n for n in layout.tasks)
    if request.gpus_per_node is not None:
        return (request.gpus_per_node,) * len(layout.nodes)
    if request.gpus is not None:
        q, r = divmod(request.gpus, len(layout.nodes))
        return tuple(q + (i < r) for i in range(len(layout.nodes)))
    if request.overlap or not any(job_gpus):
        return None
    return tuple(job_gpus)


def pick_cpus(held: Collection[int], total: int, want: int) -> tuple[int, ...] | None:
    """The ``want`` lowest of a job's ``total`` CPUs on a node (by their place among the
    job's CPUs there, 0..total-1) that no other step holds; None while too few are free
    (srun waits)."""
    free = [c for c in range(total) if c not in held]
    return tuple(free[:want]) if len(free) >= want else None


def pick_gpus(
    job_id: int, node: str, job_gpus: Sequence[int], held: Collection[int], want: int
) -> tuple[int, ...] | None:
    """The ``want`` first of the job's GPUs on ``node`` that no other step holds, as
    Slurm gives a step its own (``SLURM_STEP_GPUS``); None while too few are free (srun
    waits: "Requested nodes are busy"). More than the job has there is refused, as
    Slurm 22.05.8's srun refuses it (docs/slurm-checks.md)."""
    if want > len(job_gpus):
        raise refused(
            job_id,
            f"Invalid generic resource (gres) specification: the step requested "
            f"gres=gpu:{want} on {node}, more than the job's gres=gpu:{len(job_gpus)} there",
        )
    free = [g for g in job_gpus if g not in held]
    return tuple(free[:want]) if len(free) >= want else None


def step_layout(
    request: StepRequest,
    job_id: int,
    job_nodes: Sequence[str],
    job_ntasks: int,
    *,
    cpus_per_node: Sequence[int] = (),
    cpus_per_task: int = 1,
) -> StepLayout:
    """The step's nodes and tasks within the job's allocation ``job_nodes``.

    Without ``-N``/``-w`` the step spans the whole allocation with the job's task count,
    at least one per node (srun reads ``SLURM_NNODES`` and ``SLURM_NTASKS`` inside a
    job); with them, one task
    per node unless ``-n``/``--ntasks-per-node`` say otherwise. Fewer tasks than nodes
    use fewer nodes, as srun does ("can't run 1 processes on 2 nodes, setting nnodes to
    1"). With ``cpus_per_node`` (the job's CPUs on each node), a node may not run more
    tasks than its CPUs hold ("More processors requested than permitted"). The ranks
    go to the nodes as ``request.distribution`` (``-m``) deals them: cyclic keeps
    block's counts, plane=S decides them, and arbitrary takes a ``-w`` name per task."""
    allocated = list(job_nodes)
    dist = request.distribution
    for name in request.nodelist:
        if name not in allocated:
            raise refused(
                job_id,
                f"Requested node configuration is not available: node {name} is not in "
                f"the job's allocation ({','.join(allocated)}); name nodes of the job in -w",
            )
    if dist.kind == "arbitrary":
        chosen, tasks, placed = _arbitrary(request, job_id, allocated)
        return _checked(
            StepLayout(tuple(chosen), tuple(tasks), placed, "arbitrary"),
            job_id,
            allocated,
            cpus_per_node,
            cpus_per_task,
        )
    count = request.nodes
    if count is None:
        count = len(request.nodelist) or len(allocated)
    if count > len(allocated):
        raise refused(
            job_id,
            f"Requested node configuration is not available: the step asks for {count} "
            f"nodes and the job has {len(allocated)}; ask for at most {len(allocated)} (-N)",
        )
    if count < len(request.nodelist):
        raise refused(
            job_id,
            f"-w names {len(request.nodelist)} nodes but -N asks for {count}; "
            "make -N at least the number of nodes in -w",
        )
    per_node = request.ntasks_per_node
    explicit_nodes = request.nodes is not None or bool(request.nodelist)
    ntasks = request.ntasks
    if ntasks is None:
        # (a job of several nodes whose task count HAL left at 1, as for `sbatch -N2`,
        # where Slurm leaves SLURM_NTASKS unset and srun starts one task per node)
        implied = count if explicit_nodes else max(job_ntasks, count)
        ntasks = count * per_node if per_node else implied
    if ntasks < count:
        if ntasks < len(request.nodelist):
            raise refused(
                job_id,
                f"{ntasks} task(s) cannot run on the {len(request.nodelist)} nodes -w names; "
                "ask for more tasks (-n) or fewer nodes",
            )
        count = ntasks
    chosen = [n for n in allocated if n in request.nodelist]
    chosen += [n for n in allocated if n not in chosen][: count - len(chosen)]
    chosen.sort(key=allocated.index)
    if per_node:
        if ntasks > count * per_node:
            raise refused(
                job_id,
                f"{ntasks} tasks do not fit {count} node(s) of {per_node} task(s) each; "
                "raise --ntasks-per-node or -N, or lower -n",
            )
        tasks = [min(per_node, ntasks - i * per_node) for i in range(count)]
        tasks = [t for t in tasks if t > 0]
        chosen = chosen[: len(tasks)]
    else:
        q, r = divmod(ntasks, count)
        tasks = [q + 1 if i < r else q for i in range(count)]
    rank_sets: tuple[tuple[int, ...], ...] = ()
    if dist.kind == "cyclic":  # as many on each node as block puts there
        rank_sets = tuple(tuple(r) for r in deal(ntasks, tasks))
    elif dist.kind == "plane":  # the planes decide the counts (a node left none goes)
        dealt = deal(ntasks, [per_node or ntasks] * len(chosen), dist.plane_size)
        chosen = [name for name, r in zip(chosen, dealt, strict=True) if r]
        rank_sets = tuple(tuple(r) for r in dealt if r)
        tasks = [len(r) for r in rank_sets]
    variable = dist.variable(ntasks, len(chosen))
    layout = StepLayout(tuple(chosen), tuple(tasks), rank_sets, variable, dist.plane_size)
    return _checked(layout, job_id, allocated, cpus_per_node, cpus_per_task)


def _arbitrary(
    request: StepRequest, job_id: int, allocated: list[str]
) -> tuple[list[str], list[int], tuple[tuple[int, ...], ...]]:
    """``-m arbitrary``: rank i on the i-th name of ``-w``, a node named once per task."""
    names = request.nodelist
    if not names:
        raise InvalidRequest(
            "-m arbitrary places each task on the node named for it: list one node per "
            "task in order with -w (-w n1,n1,n2 for three tasks) or in SLURM_HOSTFILE"
        )
    if request.ntasks is not None and request.ntasks != len(names):
        raise InvalidRequest(
            f"You asked for {request.ntasks} tasks but hostlist specified {len(names)} "
            "nodes; with -m arbitrary name one node per task in -w, or leave -n out"
        )
    chosen = sorted(set(names), key=allocated.index)
    if request.nodes is not None and request.nodes != len(chosen):
        raise refused(
            job_id,
            f"-N asks for {request.nodes} nodes and -w names {len(chosen)} for -m "
            "arbitrary; leave -N out or make it match",
        )
    rank_sets = tuple(tuple(i for i, n in enumerate(names) if n == name) for name in chosen)
    per_node = request.ntasks_per_node
    if per_node and any(len(r) > per_node for r in rank_sets):
        raise refused(
            job_id,
            f"-w names a node more than --ntasks-per-node={per_node} times; "
            "raise --ntasks-per-node or name that node less often",
        )
    return chosen, [len(r) for r in rank_sets], rank_sets


def _checked(
    layout: StepLayout,
    job_id: int,
    allocated: list[str],
    cpus_per_node: Sequence[int],
    cpus_per_task: int,
) -> StepLayout:
    """``layout``, unless a node of it runs more tasks than the job's CPUs there hold."""
    if cpus_per_node:
        for name, n in zip(layout.nodes, layout.tasks, strict=True):
            have = cpus_per_node[allocated.index(name)]
            if n * cpus_per_task > have:
                raise refused(
                    job_id,
                    f"More processors requested than permitted: {n} task(s) of "
                    f"{cpus_per_task} CPU(s) on {name}, where the job has {have} CPU(s); "
                    "ask for fewer tasks (-n) or spread them over more nodes (-N)",
                )
    return layout


def own_max_rss(ru_maxrss_kib: int, inherited: int) -> int:
    """A reaped task's most resident bytes, from its ``wait4`` ``ru_maxrss``, or 0 when
    unknown. Linux counts what the task held at its fork (its parent's resident memory;
    after a ``vfork``, its parent's peak) in ``ru_maxrss`` across exec, so a peak not
    above ``inherited`` (what its parent, srun or the step keeper, held then) is not the
    task's own."""
    peak = ru_maxrss_kib * 1024
    return peak if peak > inherited + INHERITED_RSS_MARGIN else 0
