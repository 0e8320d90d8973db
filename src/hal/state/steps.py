"""Job steps on the server (ADR 0012): ``srun`` in a job asks for one, the job's agents
run its tasks, and the tasks' output and end come back here for srun to read.

Life of a step::

    POST /v1/jobs/{id}/steps ── layout (core.steps) ── StepLaunch to each node's agent
        agents' syncs: StepOutput (by offset, each byte once) ─▶ Step.chunks ─▶ srun polls
                       StepBadExit (srun -K: a task failed) ─▶ the step's other tasks end
                       StepEnd per node ─▶ all nodes ended ─▶ COMPLETED / FAILED / CANCELLED
    job leaves RUNNING (cancel, time limit, node failure) ─▶ StepSignal(SIGTERM, KillWait)
    job SUSPENDED (scontrol suspend, preemption) ─▶ StepSignal(SIGSTOP); RUNNING again ─▶ SIGCONT
    agent registers again, listing the steps it holds ─▶ those go on; a part it does
        not list ends (exit 1); one whose job ended meanwhile is ended by the agent

A step srun runs on the batch node itself (a one-node job's ``srun cmd``) is a **local
step**: srun opens it here (``open_local``: numbered with the others, no agent told),
runs the tasks itself and reports their end (``end_local``). A job that leaves RUNNING
with a local step open ends it CANCELLED (0:15), as its tasks die with the job.

Running steps live in memory and in ``running_steps``, local ones too, so a restarted
server takes them up again (``restore``, ``hal.state.step_restore``): a local step as
local (no agent holds it; srun's end report still finds it). Their ends are written to
accounting (``job_steps``, sacct's ``JOB.N`` rows), with what their tasks used (their
GPUs too, where given) as each node's end (or srun's) reported it
(``hal.state.step_usage``).
Output waits here until srun has read it, at most ``MAX_BUFFERED_BYTES`` per step (the
oldest is dropped past that, and srun says so).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

import hostlist

from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.core.job import Allocation, Job
from hal.core.states import JobState
from hal.core.suspension import suspended_seconds
from hal.slurm.multi_prog import MultiProg
from hal.slurm.steps import (
    ENDED_SAYING,
    OOM_SIGNAL,
    TIME_LIMIT,
    StepLayout,
    StepRequest,
    refused,
    step_environment,
    step_layout,
)
from hal.state.cluster import Caller, Cluster
from hal.state.launch import build_launch
from hal.state.step_input import InputRelay, InputTaken, readers
from hal.state.step_restore import (
    cpus_of,
    cursor_base,
    ended_of,
    gpu_ids_of,
    gpus_of,
    layout_of,
    memory_of,
    relay_of,
    running_row,
    times_of,
    totals_of,
)
from hal.state.step_share import Asked, Taken, asked, taken
from hal.state.step_usage import cpu_times, gpu_summary, summary
from hal.state.store import DatabaseUnavailable, RunningStepRow, StepRow
from hal.wire.agent import (
    RunningStep,
    StepBadExit,
    StepEnd,
    StepInput,
    StepInputFed,
    StepLaunch,
    StepOutput,
    StepSignal,
    StepTaskUsage,
)
from hal.wire.steps import TaskTotals

log = logging.getLogger("hal.steps")

MAX_BUFFERED_BYTES = 16 << 20  # per step, unread by srun
PAGE_BYTES = 1 << 20  # per answer to srun
WHOLE = StepRequest()  # a step without -c, --exact or --overlap: all the job's CPUs
KEEP_ENDED_SECONDS = 600.0  # an ended step stays readable this long
LOST_EXIT_CODE = 1  # a node's part whose agent restarted (its tasks died with it)
Key = tuple[int, int, int]  # (job id, its run: the job's restarts, step id)


@dataclass(slots=True)
class Step:
    job_id: int
    step_id: int
    attempt: int
    name: str
    layout: StepLayout
    start_time: float
    state: str = "RUNNING"
    exit_code: int = 0
    exit_signal: int = 0  # the signal that ended the task of ``exit_code`` (0: it exited)
    end_time: float | None = None
    # node → its highest exit code (128+N for a signal N) and that signal, or 0
    ended: dict[str, tuple[int, int]] = field(default_factory=dict)
    oom: bool = False  # a node's part ended for the job's memory limit
    # running tasks' latest samples by rank, with their node (sstat; memory only)
    usage: dict[int, tuple[str, StepTaskUsage]] = field(default_factory=dict)
    # ended tasks' node, most RSS and CPU seconds by rank, from their node's end (sacct)
    totals: dict[int, tuple[str, int, float]] = field(default_factory=dict)
    # ... their user and system CPU seconds by rank, where their node's end said them
    times: dict[int, tuple[float, float]] = field(default_factory=dict)
    # ended tasks' most GPU memory, most and mean utilisation by rank, where their node
    # read them (a step given GPUs there)
    gpus: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    # the GPUs it holds on each node, where it asked for its own (srun --gpus...): no
    # other such step of the job gets them until its part there ends
    gpu_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # the job's CPUs it holds on each node, by their place among the job's CPUs there
    # (all of them, or its tasks' with --exact; none with --overlap): no other step of
    # the job gets them until its part there ends
    cpus: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # its CPUs in all, as scontrol show step counts them: those it holds, or, with
    # --overlap, those it would hold without it
    cpu_count: int = 0
    # the job's memory it holds on each node, in bytes (none with --overlap, or in a job
    # that asked for no memory), and its memory in all as scontrol show step counts it
    memory: dict[str, int] = field(default_factory=dict)
    memory_bytes: int = 0
    # unread output: (cursor, rank, stream, bytes), cursor increasing from 1
    chunks: list[tuple[int, int, str, bytes]] = field(default_factory=list)
    cursor: int = 0
    buffered: int = 0
    dropped: int = 0  # bytes dropped unread (MAX_BUFFERED_BYTES)
    received: dict[tuple[int, str], int] = field(default_factory=dict)  # bytes per stream
    cancelled: bool = False
    cancelled_at: float | None = None  # scancel JOB.STEP, or its job's end, ended it then
    cancel_reason: str = ""  # slurmstepd's words for why: "" or "DUE TO TIME LIMIT"
    cancelled_by: str | None = None  # who scancel'd it alone (sacct's "CANCELLED by UID")
    with_job: bool = False  # its job's end (cancel, time limit, requeue...) ends it
    # srun -K: a task's failure ended it (``cancelled_at``: then), as srun's "_step_signal"
    # does in Slurm; its state stays its tasks' (a task a signal ended: CANCELLED), as
    # that of a local step srun -K ended
    bad_exit: bool = False
    timed_out: bool = False  # its own time limit (srun -t) ended it (sacct's TIMEOUT)
    stopped: bool = False  # its job is suspended: its tasks were sent SIGSTOP
    local: bool = False  # srun runs its tasks on the batch node and reports their end
    srun: str = ""  # a local step's srun process, "PID:START" (``StepCreate.srun``)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    restored: bool = False  # taken up by a restarted server: a stream starts where it is
    relay: InputRelay | None = None  # srun's stdin for its tasks (``step_input``)
    input_lost: bool = False  # restored: srun's input it had is gone, the tasks got EOF

    @property
    def done(self) -> bool:
        return self.end_time is not None

    @property
    def srun_exit_code(self) -> int:
        """What srun exits with: the worst task's code (128+N for a signal N), and 1 for
        a step ended for memory (whose ExitCode is 0:125), as Slurm's srun."""
        return 1 if self.state == JobState.OUT_OF_MEMORY.value else self.exit_code

    def hold(self, asks: Asked, share: Taken) -> None:
        """What the step holds of its job from now on (``hal.state.step_share``)."""
        self.gpu_ids = share.gpu_ids or {}
        self.cpus, self.cpu_count = share.cpus, sum(asks.cpus.values())
        self.memory, self.memory_bytes = share.memory, sum(asks.memory.values())

    def take(self, rank: int, stream: str, offset: int, data: bytes) -> None:
        """Bytes ``offset..`` of a task's stream; what was taken before is skipped."""
        have = self.received.get((rank, stream), offset if self.restored else 0)
        if offset > have or offset + len(data) <= have:
            return  # a gap (cannot happen: the agent sends in order) or a repeat
        data = data[have - offset :]
        self.received[(rank, stream)] = have + len(data)
        self.cursor += 1
        self.chunks.append((self.cursor, rank, stream, data))
        self.buffered += len(data)
        while self.buffered > MAX_BUFFERED_BYTES and len(self.chunks) > 1:
            dropped = self.chunks.pop(0)
            self.buffered -= len(dropped[3])
            self.dropped += len(dropped[3])
        self.changed.set()

    def read(self, after: int) -> list[tuple[int, int, str, bytes]]:
        """Chunks past cursor ``after``, about ``PAGE_BYTES`` of them (at least one);
        those up to it are read and go."""
        while self.chunks and self.chunks[0][0] <= after:
            self.buffered -= len(self.chunks.pop(0)[3])
        page: list[tuple[int, int, str, bytes]] = []
        size = 0
        for chunk in self.chunks:
            if page and size + len(chunk[3]) > PAGE_BYTES:
                break
            page.append(chunk)
            size += len(chunk[3])
        return page


class StepTable:
    """The running and recently ended steps of every job."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.steps: dict[Key, Step] = {}
        self._ending: set[asyncio.Task[None]] = set()  # local steps ended by their job
        # (job, run) → the last step id given in that run (_next_step_id)
        self._last_ids: dict[tuple[int, int], int] = {}
        self.closing = False  # the server stops: srun's reads answer at once
        # per job: one of its steps at a time takes free CPUs and GPUs (its DB write in)
        self._giving: dict[int, asyncio.Lock] = {}
        # ended steps the database could not take: written again at housekeeping (a
        # step that ended during an outage was missing from sacct for good)
        self._unrecorded: dict[Key, StepRow] = {}
        # the runs (job, restarts) whose steps got their --signal (hal.state.step_signal)
        self.signalled: set[tuple[int, int]] = set()
        cluster.on_jobs_changed(self._on_jobs)

    # -- srun's side -------------------------------------------------------------------

    async def create(
        self,
        job_id: int,
        caller: Caller,
        request: StepRequest,
        argv: list[str],
        environment: dict[str, str],
        name: str = "",
        multi_prog: MultiProg | None = None,
        workdir: str = "",
        only_environment: bool = False,
        kill_on_bad_exit: bool = False,
        stdin: str = "",
        relay_input: bool = False,
        input_rank: int | None = None,
        pty: tuple[int, int] | None = None,
    ) -> Step:
        """``multi_prog`` (``srun --multi-prog``): ``argv`` is its file's name and the
        arguments after it; each rank runs its line's command, and a rank without one
        refuses the step before anything starts. ``workdir``: the tasks' (srun's; "":
        the job's). ``only_environment`` (srun ``--export`` other than ALL): of the
        job's own environment the tasks get only its ``SLURM*``/``HAL_*`` variables
        besides ``environment``, not what the job's submitter exported.
        ``kill_on_bad_exit`` (srun ``-K``): the first task to fail ends the others, on
        every node (its agent reports it: ``bad_exit``). ``stdin`` (srun ``-i FILE``):
        the pattern of each task's input file, opened on its node ("": none).
        ``relay_input``: srun sends its own stdin (``take_input``), for every task, or
        for rank ``input_rank`` alone (srun ``-i N``); the others read /dev/null.
        ``pty`` (srun ``--pty``: srun's terminal, rows and columns): rank 0 runs in a
        pseudo-terminal of that size and reads srun's input, which ``relay_input`` and
        ``input_rank`` 0 must then ask for."""
        cluster = self.cluster
        if pty is not None and not (relay_input and input_rank == 0):
            raise InvalidRequest(
                "a step with a terminal (pty) relays srun's input to task 0: set "
                "relay_input and input_rank 0",
                field="pty",
            )
        job, alloc = self._running_job(job_id, caller)
        layout = step_layout(
            request,
            job_id,
            alloc.nodes,
            job.spec.ntasks,
            cpus_per_node=[r.cpus for r in alloc.per_node],
            cpus_per_task=job.spec.cpus_per_task,
        )
        commands = [] if multi_prog is None else multi_prog.argv(layout.ntasks, argv[1:])
        if relay_input and input_rank is not None and input_rank >= layout.ntasks:
            raise refused(
                job_id,
                f"--input={input_rank}: the step has tasks 0 to {layout.ntasks - 1}; "
                "name one of them, or leave -i out for all",
            )
        missing = [n for n in layout.nodes if n not in cluster.agent_sessions]
        if missing:
            raise refused(
                job_id,
                f"the agent of {','.join(missing)} is not connected; try again once the "
                "node is up (hal sinfo)",
            )
        self._prune()
        # a step holds its CPUs, memory and GPUs before the next step looks
        asks = asked(job, alloc, layout, request)
        async with self._giving.setdefault(job_id, asyncio.Lock()):
            share = taken(job, alloc, layout, request, asks, self._running(job_id))
            step_id = await self._next_step_id(job_id, job.restarts)
            now = cluster.clock.now()
            step = Step(job_id, step_id, job.restarts, name or argv[0], layout, now)
            step.hold(asks, share)
            if relay_input:
                ranks = [tuple(layout.ranks(i)) for i in range(len(layout.nodes))]
                found = readers(layout.nodes, ranks, input_rank)
                step.relay = InputRelay(job_id, step_id, job.restarts, found)
            await cluster.db(cluster.store.keep_running_step, _row(step))  # for a restart
            self.steps[_key(step)] = step
        base = build_launch(job, cluster.config.cluster_name)
        job_env = base.environment
        if only_environment:
            job_env = {k: v for k, v in job_env.items() if k.startswith(("SLURM", "HAL_"))}
        base = base.model_copy(
            update={"script": "", "environment": job_env, "workdir": workdir or base.workdir}
        )
        common = step_environment(step_id, layout)
        for index, node in enumerate(layout.nodes):
            at = list(alloc.nodes).index(node)
            res = alloc.per_node[at]
            launch = base.model_copy(
                update={
                    "environment": {**base.environment, **environment},
                    "node_index": at,
                    "cpus": res.cpus,
                    "memory_bytes": res.memory_bytes,
                    "gpu_ids": list(alloc.gpu_ids[at]) if alloc.gpu_ids else [],
                }
            )
            cluster.agent_sessions[node].push(
                StepLaunch(
                    job_id=job_id,
                    step_id=step_id,
                    launch=launch,
                    argv=argv,
                    ranks=list(layout.ranks(index)),
                    rank_argv=[commands[r] for r in layout.ranks(index)] if commands else [],
                    step_node_index=index,
                    environment=common,
                    gpu_ids=None if share.gpu_ids is None else list(share.gpu_ids[node]),
                    cpus=list(step.cpus[node]) if node in step.cpus else None,
                    memory_bytes=asks.memory[node],
                    time_limit_seconds=request.time_limit_s,
                    kill_wait_seconds=cluster.config.kill_wait_seconds,
                    gpus_per_task=request.gpus_per_task,
                    kill_on_bad_exit=kill_on_bad_exit,
                    input=stdin,
                    relay_ranks=list(step.relay.readers.get(node, ())) if step.relay else [],
                    pty=list(pty) if pty is not None and index == 0 else [],
                )
            )
        return step

    async def take_input(
        self,
        step: Step,
        offset: int,
        data: bytes,
        eof: bool,
        wait: float,
        kept: int | None = None,
    ) -> InputTaken:
        """srun's stdin bytes ``offset..`` (and its end) for the step's tasks, passed on
        to their agents; waits up to ``wait`` s while the step holds ``RELAY_BYTES`` of
        it, or, once it has the end, for the tasks to take more (srun, holding its input
        from ``kept`` on, learns what it may drop)."""
        relay = step.relay
        taken = offset + len(data)
        if relay is None:
            if step.done:
                return InputTaken(taken, taken, closed=True)
            if step.restored and not step.local:  # (its input was in the old server's memory)
                if not step.input_lost:
                    step.input_lost = True
                    lost = InputRelay(step.job_id, step.step_id, step.attempt, {}).lost()
                    for node in step.layout.nodes:
                        if (session := self.cluster.agent_sessions.get(node)) is not None:
                            session.push(lost)
                return InputTaken(taken, taken, closed=True, lost=True)
            raise InvalidRequest(
                f"step {step.job_id}.{step.step_id} takes no input from srun (its srun "
                "did not ask to relay its stdin)"
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            if step.done or relay.done:
                return InputTaken(taken, taken, closed=True)
            before = (relay.top, relay.end)
            top = relay.take(offset, data, eof, kept)
            self._push_input(step, relay)
            reply = InputTaken(top, min(relay.base, top))
            if top < offset or deadline <= loop.time() or self.closing:
                return reply  # (below offset: srun sends again from there)
            if top >= taken and (not eof or relay.end is not None):
                news = (relay.top, relay.end) != before or relay.base != kept
                if news or not eof:
                    return reply
                # (srun has sent all, its end too: it waits to learn what it may drop)
            left = deadline - loop.time()
            relay.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(relay.changed.wait(), timeout=left)

    def resize(self, step: Step, rows: int, columns: int) -> None:
        """srun's terminal is now ``rows`` x ``columns``: the step's terminal (its task
        0's, srun ``--pty``) follows; nothing for a step without one."""
        relay = step.relay
        if relay is None or step.done or not step.layout.nodes:
            return
        node = step.layout.nodes[0]  # (task 0's)
        session = self.cluster.agent_sessions.get(node)
        if session is not None and node not in step.ended:
            size = [rows, columns]
            session.push(
                StepInput(
                    job_id=step.job_id,
                    step_id=step.step_id,
                    attempt=step.attempt,
                    offset=relay.top,
                    winsize=size,
                )
            )

    def _push_input(self, step: Step, relay: InputRelay, only: str = "") -> None:
        """What each reading node's agent was not sent yet of srun's input."""
        for node in relay.readers:
            session = self.cluster.agent_sessions.get(node)
            if session is not None and only in ("", node) and node not in step.ended:
                for instruction in relay.pushes(node):
                    session.push(instruction)

    def _running(self, job_id: int) -> list[Step]:
        """The job's steps that still run (on some of their nodes, ``Step.ended`` says)."""
        return [s for s in self.steps.values() if s.job_id == job_id and not s.done]

    async def open_local(
        self,
        job_id: int,
        caller: Caller,
        node: str,
        ntasks: int,
        name: str,
        request: StepRequest = WHOLE,
        *,
        srun: str = "",
    ) -> Step:
        """A step srun runs on ``node``, the batch node, itself: numbered in the job's
        sequence and shown running until srun reports its end (``end_local``). Nothing is
        pushed to an agent, so no agent need be connected. It holds the job's CPUs, memory
        and GPUs there as ``request`` asks (``-c``, ``--exact``, ``--overlap``, ``--mem``),
        as any step does."""
        job, alloc = self._running_job(job_id, caller)
        if node not in alloc.nodes:
            raise refused(job_id, f"node {node} is not in the job's allocation")
        if ntasks * (request.cpus_per_task or 1) > alloc.per_node[alloc.nodes.index(node)].cpus:
            # as Slurm 22.05.8 refuses `srun -n3` in a 2-CPU job (HAL ran three tasks)
            raise refused(job_id, "More processors requested than permitted")
        self._prune()
        layout = StepLayout((node,), (ntasks,))
        asks = asked(job, alloc, layout, request)
        async with self._giving.setdefault(job_id, asyncio.Lock()):
            share = taken(job, alloc, layout, request, asks, self._running(job_id))
            step_id = await self._next_step_id(job_id, job.restarts)
            now = self.cluster.clock.now()
            step = Step(job_id, step_id, job.restarts, name, layout, now, local=True)
            step.srun = srun
            step.hold(asks, share)
            await self.cluster.db(self.cluster.store.keep_running_step, _row(step))  # restart
            self.steps[_key(step)] = step
        return step

    async def end_local(
        self,
        step: Step,
        exit_code: int,
        exit_signal: int,
        *,
        oom: bool,
        cancelled: bool,
        timed_out: bool = False,
        tasks: Sequence[TaskTotals] = (),
    ) -> None:
        """srun's report of its local step's end (``cancelled``: srun passed SIGINT or
        SIGTERM on to its tasks; ``timed_out``: its own time limit ended it; ``tasks``:
        what they used, as srun measured its children). A step already ended (its job
        ended first) keeps what it has."""
        if not step.local:
            raise InvalidRequest(
                f"step {step.job_id}.{step.step_id} runs through the job's agents, which "
                "report its end; only a step srun runs on the batch node is ended by srun"
            )
        step.cancelled = step.cancelled or cancelled
        step.timed_out = step.timed_out or timed_out
        await self._end_local_part(step, exit_code, exit_signal, oom, tasks)

    async def _end_local_part(
        self,
        step: Step,
        exit_code: int,
        exit_signal: int,
        oom: bool = False,
        tasks: Sequence[TaskTotals] = (),
    ) -> None:
        node = step.layout.nodes[0]
        if node not in step.ended:  # (checked and set with no await between: once)
            await self._node_ended(step, node, exit_code, exit_signal, oom, tasks)

    def get(self, job_id: int, step_id: int, caller: Caller) -> Step:
        """Step ``step_id`` of the job's latest run (srun's, scancel's, scontrol's: each
        run numbers its steps from 0, as Slurm's)."""
        job = self._job(job_id, caller)
        step = self.steps.get((job_id, job.restarts, step_id))
        if step is None:
            raise NotFound(
                f"job {job_id} has no step {step_id} running or recently ended; see sacct -j "
                f"{job_id} for ended ones"
            )
        return step

    async def read(self, step: Step, after: int, wait: float) -> list[tuple[int, int, str, bytes]]:
        """Output past ``after``, waiting up to ``wait`` s for some (or the step's end)."""
        chunks = step.read(after)
        if chunks or step.done or wait <= 0 or self.closing:
            return chunks
        step.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(step.changed.wait(), timeout=wait)
        return step.read(after)

    def release_waiters(self) -> None:
        """The server stops: srun's held reads answer now (srun asks the next server)."""
        self.closing = True
        for step in self.steps.values():
            step.changed.set()
            if step.relay is not None:
                step.relay.changed.set()

    async def stop(self) -> None:
        """The server stops, before the store closes: the ends of local steps whose job
        ended (``_end_with_job``) are written, not dropped with the loop."""
        while pending := [task for task in self._ending if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def cancel(self, step: Step, signum: int | None, by: str | None = None) -> None:
        """``scancel JOB.STEP``: the step's tasks are killed on every node where they
        still run and it ends CANCELLED, each node's output saying so in slurmstepd's
        words and srun in its own ("Job step aborted"), as Slurm 22.05.8's; with
        ``signum`` (``scancel -s``), only that signal. A step srun runs on the batch
        node is the batch node's agent's to reach (its cgroup, else srun). The cancel is
        kept for a restart: a restarted server kills the step again where its agent
        had not done it (``node_registered``), and srun still says so. ``by``: who asked
        (sacct's "CANCELLED by UID")."""
        if step.done:
            raise Conflict(
                f"step {step.job_id}.{step.step_id} has already ended ({step.state})",
                field="state",
            )
        if signum is not None:
            if step.local:
                self._push_local(step, signum)
            else:
                self.signal(step, signum)
            return
        now = self.cluster.clock.now()
        if step.local:  # (first: it is refused while the node's agent is away)
            self._push_local(step, signal.SIGKILL, now)
        else:
            self._push(step, signal.SIGKILL, cancelled_at=now)
        step.cancelled, step.cancelled_at, step.cancelled_by = True, now, by
        step.changed.set()  # srun, waiting for output, learns it now
        try:
            await self.cluster.db(self.cluster.store.keep_running_step, _row(step))
        except DatabaseUnavailable as err:  # (the kill is on its way all the same)
            log.warning("step %d.%d: its cancel not kept: %s", step.job_id, step.step_id, err)

    async def bad_exit(self, step: Step) -> None:
        """srun -K: a task of the step failed (its agent said so, and wrote srun's lines
        for it): its other tasks are ended on every node where they run, as its job's end
        ends them (SIGTERM, SIGKILL KillWait later; slurmstepd's STEP CANCELLED line
        where they run), whether srun follows the step or not. Once; not for a step
        ending already (scancel, srun's signal, its job's end). Unlike a scancel it is
        not CANCELLED for it: its state is its tasks' ends', as a local step's."""
        if step.done or step.bad_exit or step.cancelled or step.cancelled_at is not None:
            return
        now = self.cluster.clock.now()
        step.bad_exit, step.cancelled_at = True, now
        wait = self.cluster.config.kill_wait_seconds
        self._push(step, signal.SIGTERM, kill_wait=wait, cancelled_at=now)
        step.changed.set()  # srun, waiting for output, learns it now
        try:  # a restarted server ends it again where its agent had not (node_registered)
            await self.cluster.db(self.cluster.store.keep_running_step, _row(step))
        except DatabaseUnavailable as err:  # (the signal is on its way all the same)
            log.warning("step %d.%d: its -K end not kept: %s", step.job_id, step.step_id, err)

    def _push_local(self, step: Step, signum: int, cancelled_at: float | None = None) -> None:
        node = step.layout.nodes[0]
        session = self.cluster.agent_sessions.get(node)
        if session is None:
            raise Conflict(
                f"the agent of {node}, where srun runs step {step.job_id}.{step.step_id}, is "
                "not connected; try again once the node is up (hal sinfo)"
            )
        session.push(
            StepSignal(
                job_id=step.job_id,
                step_id=step.step_id,
                signal=signum,
                cancelled_at=cancelled_at,
                local=True,
                srun=step.srun,
                attempt=step.attempt,
            )
        )

    def signal(self, step: Step, signum: int) -> None:
        """Deliver ``signum`` to the step's tasks on every node where they still run. A
        local step's tasks are srun's children, out of the server's reach: refused."""
        if step.local:
            raise Conflict(
                f"srun runs step {step.job_id}.{step.step_id} on the batch node itself; "
                "signal srun (or scancel the job)"
            )
        if step.done:
            return
        if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            step.cancelled = True
        if signum == signal.SIGTERM and self.time_up(step):  # srun passing its job's end on
            self._push(step, signum, cancelled_at=step.cancelled_at, reason=TIME_LIMIT)
            return
        self._push(step, signum)

    def time_up(self, step: Step) -> bool:
        """Whether the step's job has run out of time: its agent is ending it (agents
        enforce time limits, and the server hears of it once the job has ended), so the
        step ends for the limit, as slurmstepd's line and srun say (``cancelled_at``,
        ``cancel_reason``: set here)."""
        if step.cancelled_at is not None or step.done:
            return step.cancel_reason == TIME_LIMIT
        job = self.cluster.jobs.get(step.job_id)
        if job is None or job.state is not JobState.RUNNING or job.start_time is None:
            return False
        now = self.cluster.clock.now()
        due = job.start_time + job.time_limit_s + suspended_seconds(job, now)
        if not job.time_limit_s or now < due:
            return False
        step.cancelled_at, step.cancel_reason, step.with_job = due, TIME_LIMIT, True
        return True

    # -- the agents' side --------------------------------------------------------------

    async def received(
        self,
        node: str,
        output: Sequence[StepOutput],
        ends: Sequence[StepEnd],
        bad_exits: Sequence[StepBadExit] = (),
        input_fed: Sequence[StepInputFed] = (),
    ) -> None:
        """A sync's step output, srun -K failures and ends from ``node``'s agent, and how
        far its tasks got with srun's relayed stdin (repeats are ignored)."""
        for fed in input_fed:
            step = self.steps.get((fed.job_id, fed.attempt, fed.step_id))
            if step is not None and step.relay is not None and not step.done:
                step.relay.progress(node, fed.rank, fed.offset, fed.closed)
        for chunk in output:
            step = self._reported(node, chunk.job_id, chunk.attempt, chunk.step_id)
            if step is None or node not in step.layout.nodes or step.done:
                continue
            nodes_ranks = step.layout.ranks(step.layout.nodes.index(node))
            if chunk.rank in nodes_ranks:
                step.take(chunk.rank, chunk.stream, chunk.offset, _decode(chunk.data_b64))
        for bad in bad_exits:  # (before the ends: the node's end may come with it)
            step = self._reported(node, bad.job_id, bad.attempt, bad.step_id)
            if step is not None and node in step.layout.nodes and not step.local:
                await self.bad_exit(step)
        for end in ends:
            step = self._reported(node, end.job_id, end.attempt, end.step_id)
            if step is not None and node in step.layout.nodes and node not in step.ended:
                step.timed_out = step.timed_out or end.timed_out
                await self._node_ended(
                    step, node, end.exit_code, end.exit_signal, end.oom, end.tasks
                )

    def sampled(self, node: str, usage: Sequence[StepTaskUsage]) -> None:
        """``node``'s agent's latest samples of its step tasks (``sstat``): a sample
        covers all the node's tasks, so a task of it not in it has ended there."""
        fresh: dict[tuple[int, int, int, int], StepTaskUsage] = {}
        for u in usage:
            step = self._reported(node, u.job_id, u.attempt, u.step_id)
            if step is not None:
                fresh[(*_key(step), u.rank)] = u
        for key, step in self.steps.items():
            if step.done or node not in step.layout.nodes:
                continue
            for rank in step.layout.ranks(step.layout.nodes.index(node)):
                found = fresh.get((*key, rank))
                if found is not None:
                    step.usage[rank] = (node, found)
                else:
                    step.usage.pop(rank, None)

    def of_job(self, job_id: int, caller: Caller) -> list[Step]:
        """The running steps of the job's latest run, by step id (an earlier run's,
        still ending after a requeue, would repeat its ids: it is no longer the job's)."""
        job = self._job(job_id, caller)
        return sorted(
            (
                s
                for (j, a, _), s in self.steps.items()
                if (j, a) == (job_id, job.restarts) and not s.done
            ),
            key=lambda s: s.step_id,
        )

    def current(self) -> list[Step]:
        """The running steps of every job's latest run, by job and step id (``squeue
        -s``: an earlier run's, still ending after a requeue, would repeat its ids)."""
        jobs = self.cluster.jobs
        return sorted(
            (
                s
                for (j, a, _), s in self.steps.items()
                if not s.done and (job := jobs.get(j)) is not None and job.restarts == a
            ),
            key=lambda s: (s.job_id, s.step_id),
        )

    def held(self, node: str, parts: Sequence[RunningStep]) -> set[Key]:
        """The steps whose parts ``node``'s agent says it holds, by their keys (a part of
        an agent from before runs were sent: the step of that id running there)."""
        keys = set()
        for part in parts:
            if part.attempt is not None:
                keys.add((part.job_id, part.attempt, part.step_id))
            elif (step := self._reported(node, part.job_id, None, part.step_id)) is not None:
                keys.add(_key(step))
            else:
                keys.add((part.job_id, 0, part.step_id))  # (unknown: the agent ends it)
        return keys

    def _reported(self, node: str, job_id: int, attempt: int | None, step_id: int) -> Step | None:
        """The step an agent's report names: by its run, or (``attempt`` None: an agent
        from before runs were sent) the one with that id still running on ``node``, the
        latest run's first."""
        if attempt is not None:
            return self.steps.get((job_id, attempt, step_id))
        found = [
            s
            for (j, _, n), s in self.steps.items()
            if (j, n) == (job_id, step_id) and node in s.layout.nodes and node not in s.ended
        ]
        return max(found, key=lambda s: s.attempt, default=None)

    async def node_registered(self, node: str, running: set[Key]) -> list[Key]:
        """``node``'s agent registered, holding the parts of steps ``running`` there (job,
        run, step): their tasks run, or their end is on its way. Those go on. A part not among
        them is lost (its tasks died with the node, or their agent's state). Returned, for
        the agent to end: the steps this server does not know, and those whose job ended
        or that srun cancelled while the agent was away (that signal went nowhere); a
        suspended job's step is stopped again."""
        unknown = []
        for key in sorted(running):
            step = self.steps.get(key)
            if step is None or step.done or node not in step.layout.nodes or node in step.ended:
                unknown.append(key)
            elif step.cancelled or step.bad_exit or not self._live(step):
                if self._live(step) and step.cancelled_at is not None:  # scancel'd
                    self._push(step, signal.SIGKILL, only=node, cancelled_at=step.cancelled_at)
                else:
                    step.cancelled = True
                    unknown.append(key)
            elif step.stopped:
                self._push(step, signal.SIGSTOP, only=node)
            if step is not None and step.relay is not None and node in step.relay.readers:
                step.relay.registered(node)  # (its instructions of before are dropped)
                self._push_input(step, step.relay, only=node)
        for step in self.steps.values():  # the same for a step srun runs on this node
            batch = step.layout.nodes[0] == node and self._live(step) and not step.done
            if step.local and step.cancelled_at is not None and batch:
                self._push_local(step, signal.SIGKILL, step.cancelled_at)
        for key, step in list(self.steps.items()):
            if key in running or step.local:  # (a local step's tasks are srun's)
                continue
            if not step.done and node in step.layout.nodes and node not in step.ended:
                rank = step.layout.ranks(step.layout.nodes.index(node))[0]
                step.take(
                    rank,
                    "stderr",
                    step.received.get((rank, "stderr"), 0),
                    f"srun: error: {node}: the node's agent registered without its tasks "
                    f"of step {step.job_id}.{step.step_id}; they are gone\n".encode(),
                )
                await self._node_ended(step, node, LOST_EXIT_CODE)
        return unknown

    async def _node_ended(
        self,
        step: Step,
        node: str,
        exit_code: int,
        exit_signal: int = 0,
        oom: bool = False,
        tasks: Sequence[TaskTotals] = (),
    ) -> None:
        step.ended[node] = (exit_code, exit_signal)
        step.oom = step.oom or oom
        if step.relay is not None:  # its tasks there read no more of srun's input
            step.relay.node_ended(node)
        ranks = step.layout.ranks(step.layout.nodes.index(node))
        for task in tasks:  # (only the node's own ranks)
            if task.rank in ranks:
                step.totals[task.rank] = (node, task.max_rss_bytes, task.cpu_seconds)
                user, system = task.user_cpu_seconds, task.system_cpu_seconds
                if user is not None and system is not None:
                    step.times[task.rank] = (user, system)
                else:  # (a task's part sent again, now without them)
                    step.times.pop(task.rank, None)
                if task.gpu is not None:
                    gpu = task.gpu
                    step.gpus[task.rank] = (gpu.max_mem_bytes, gpu.max_util, gpu.ave_util)
        step.changed.set()
        if len(step.ended) < len(step.layout.nodes):
            try:  # a restarted server must not take this node's part for lost
                await self.cluster.db(self.cluster.store.keep_running_step, _row(step))
            except DatabaseUnavailable as err:
                log.warning(
                    "step %d.%d: %s's end not kept: %s", step.job_id, step.step_id, node, err
                )
            return
        now = self.cluster.clock.now()
        step.exit_code, step.exit_signal = max(step.ended.values())
        step.with_job = step.with_job or not self._live(step)
        if step.cancelled or step.with_job:
            step.state = JobState.CANCELLED.value
        elif step.timed_out:  # its own limit (srun -t), as Slurm 22.05.8 records it
            step.state = JobState.TIMEOUT.value
        elif step.oom:  # a task killed for the job's memory limit, as Slurm's cgroup sees it
            step.state = JobState.OUT_OF_MEMORY.value
            step.exit_code, step.exit_signal = 0, OOM_SIGNAL
        elif step.exit_signal:  # a task a signal ended: Slurm 22.05.8 records CANCELLED
            step.state = JobState.CANCELLED.value
        else:
            step.state = (JobState.COMPLETED if step.exit_code == 0 else JobState.FAILED).value
        step.end_time = now
        used = summary(step.totals)
        gpus = gpu_summary(step.gpus)
        parts = cpu_times(step.totals, step.times)
        row = StepRow(
            job_id=step.job_id,
            step_id=step.step_id,
            name=step.name,
            nodelist=hostlist.collect_hostlist(list(step.layout.nodes)),
            ntasks=step.layout.ntasks,
            state=step.state,
            exit_code=step.exit_code,
            start_time=step.start_time,
            end_time=now,
            exit_signal=step.exit_signal,
            max_rss_bytes=used.max_rss_bytes,
            max_rss_node=used.max_rss_node,
            max_rss_task=used.max_rss_task,
            ave_rss_bytes=used.ave_rss_bytes,
            total_cpu_seconds=used.total_cpu_seconds,
            user_cpu_seconds=parts[0] if parts is not None else None,
            system_cpu_seconds=parts[1] if parts is not None else None,
            gpu_max_mem_bytes=gpus.max_mem_bytes if gpus else None,
            gpu_ave_mem_bytes=gpus.ave_mem_bytes if gpus else None,
            gpu_max_util=gpus.max_util if gpus else None,
            gpu_ave_util=gpus.ave_util if gpus else None,
            cpus=step.cpu_count,
            memory_bytes=step.memory_bytes,
            cancelled_by=step.cancelled_by,
            with_job=step.with_job,
            attempt=step.attempt,
        )
        try:
            await self.cluster.db(self.cluster.store.record_step, row)
        except DatabaseUnavailable as err:  # srun still gets its exit code
            log.warning(
                "step %d.%d not recorded for sacct yet (again when the database is back): %s",
                step.job_id,
                step.step_id,
                err,
            )
            self._unrecorded[_key(step)] = row

    async def record_unrecorded(self) -> None:
        """Write the ended steps a database outage kept from accounting (housekeeping,
        once the database answers again)."""
        for key, row in list(self._unrecorded.items()):
            try:
                await self.cluster.db(self.cluster.store.record_step, row)
            except DatabaseUnavailable:
                return
            self._unrecorded.pop(key, None)

    def _on_jobs(self, jobs: Sequence[Job]) -> None:
        """Each step follows its job, as Slurm's do: a suspended job's steps stop (SIGSTOP
        to their tasks on every node), a resumed one's go on (SIGCONT), and a job that
        ended (or is ending, or was requeued) ends them: SIGTERM, SIGKILL after KillWait.
        Suspension by ``scontrol suspend`` and by preemption both pass here, as does a
        change found landed after a commit in doubt (``hal.state.resync``)."""
        wait = self.cluster.config.kill_wait_seconds
        for job in jobs:
            for step in self.steps.values():
                if step.job_id != job.id or step.done:
                    continue
                if job.state is JobState.SUSPENDED:
                    if not step.stopped:
                        step.stopped = True
                        self._push(step, signal.SIGSTOP)
                elif job.state is JobState.RUNNING:
                    if step.stopped:
                        step.stopped = False
                        self._push(step, signal.SIGCONT)
                elif not step.cancelled:
                    step.cancelled = step.with_job = True  # (SIGCONT first: stopped or not)
                    if (words := _ending_words(job)) is not None:  # slurmstepd's, srun's
                        step.cancelled_at = job.end_time or self.cluster.clock.now()
                        step.cancel_reason = words
                        step.changed.set()
                    if step.local:
                        self._end_with_job(step)
                    else:
                        self._push(
                            step,
                            signal.SIGTERM,
                            kill_wait=wait,
                            cancelled_at=step.cancelled_at,
                            reason=step.cancel_reason,
                        )

    def _end_with_job(self, step: Step) -> None:
        """A local step whose job ended: its tasks die with the job's (the agent ends
        the batch script's session), and srun may die before it reports; it ends now,
        CANCELLED 0:15 as a cancelled step reads, unless srun's report came first."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a test changing jobs by hand)
            return
        code = 128 + signal.SIGTERM
        task = loop.create_task(self._end_local_part(step, code, signal.SIGTERM))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    def _push(
        self,
        step: Step,
        signum: int,
        kill_wait: int | None = None,
        only: str = "",
        cancelled_at: float | None = None,
        reason: str = "",
    ) -> None:
        """``signum`` to the step's tasks on each node (or ``only``) where they still run
        (a local step's are srun's: the agent stops and ends them with the batch
        script's); ``cancelled_at``: scancel ended the step then (``StepSignal``)."""
        if step.local:
            return
        for node in step.layout.nodes:
            session = self.cluster.agent_sessions.get(node)
            if node not in step.ended and session is not None and only in ("", node):
                session.push(
                    StepSignal(
                        job_id=step.job_id,
                        step_id=step.step_id,
                        signal=signum,
                        kill_wait_seconds=kill_wait,
                        cancelled_at=cancelled_at,
                        reason=reason,
                        attempt=step.attempt,
                    )
                )

    async def restore(self) -> int:
        """Take up the steps a stopped server left running (at start, before any agent
        registers); returns how many. One whose job has ended since is ended by its
        agents when they register; one whose job is gone is recorded CANCELLED."""
        rows = await self.cluster.db(self.cluster.store.running_steps)
        now = self.cluster.clock.now()
        for row in rows:
            layout = layout_of(row)
            step = Step(row.job_id, row.step_id, row.attempt, row.name, layout, row.start_time)
            step.local = row.local  # srun still holds its tasks, and reports their end
            step.ended, step.oom = ended_of(row)
            step.totals = totals_of(row)
            step.times = times_of(row)
            step.gpus = gpus_of(row)
            step.gpu_ids = gpu_ids_of(row)
            step.cpus = cpus_of(row)
            step.cpu_count = sum(len(c) for c in step.cpus.values())  # (--overlap's: 0)
            step.memory = memory_of(row)
            step.memory_bytes = sum(step.memory.values())
            step.srun = row.srun
            step.cancelled_at, step.cancelled_by = row.cancelled_at, row.cancelled_by
            step.restored, step.cursor = True, cursor_base(now)
            if (found := relay_of(row)) is not None:  # (placed by srun's next request)
                step.relay = InputRelay(row.job_id, row.step_id, row.attempt, found)
                step.relay.placed = False
                step.relay.gone.update(step.ended)
            job = self.cluster.jobs.get(row.job_id)
            self.steps[_key(step)] = step
            live = self._live(step)
            step.cancelled = row.cancelled_at is not None or not live
            step.stopped = job is not None and job.state is JobState.SUSPENDED
            if step.local and not live:  # its job ended meanwhile: its tasks with it
                await self._end_local_part(step, 128 + signal.SIGTERM, signal.SIGTERM)
            elif job is None:  # purged meanwhile: nothing will report it
                for node in step.layout.nodes:
                    if node not in step.ended:
                        await self._node_ended(step, node, LOST_EXIT_CODE)
        if rows:
            log.info("took up %d running step(s) of the previous server", len(rows))
        return len(rows)

    def _live(self, step: Step) -> bool:
        """Whether the step's job (this attempt of it) still runs, or is suspended."""
        job = self.cluster.jobs.get(step.job_id)
        live = (JobState.RUNNING, JobState.SUSPENDED)
        return job is not None and job.state in live and job.restarts == step.attempt

    # -- plumbing ------------------------------------------------------------------------

    def _job(self, job_id: int, caller: Caller) -> Job:
        job = self.cluster.jobs.get(job_id)
        if job is None:
            raise NotFound(f"Unable to create step for job {job_id}: Invalid job id specified")
        if not caller.may_modify(job):
            raise PermissionDenied(
                f"job {job_id} belongs to {job.spec.user}: only its owner or an "
                "administrator may run or watch its steps"
            )
        return job

    def _running_job(self, job_id: int, caller: Caller) -> tuple[Job, Allocation]:
        """The job a new step runs in, and its allocation: a RUNNING job only."""
        job = self._job(job_id, caller)
        if job.state is not JobState.RUNNING or job.allocation is None:
            raise InvalidRequest(
                f"Unable to create step for job {job_id}: the job is {job.state.value}, "
                "not RUNNING; steps run inside a running job only"
            )
        return job, job.allocation

    async def _next_step_id(self, job_id: int, attempt: int) -> int:
        """The next step id of the job's run ``attempt``, reserved: above its steps here
        and those recorded in accounting (read once per run); each run numbers from 0,
        as Slurm's (a requeued job's new run has ``JOB.0`` again). Sruns started together
        (``srun a & srun b &``) get one each: nothing awaits between reading the last id
        and reserving the next."""
        run = (job_id, attempt)
        if run not in self._last_ids:
            stored = await self.cluster.db(self.cluster.store.last_step_id, job_id, attempt)
            self._last_ids.setdefault(run, stored)  # (another srun's may be in first)
        here = max((s for j, a, s in self.steps if (j, a) == run), default=-1)
        step_id = max(self._last_ids[run], here) + 1
        self._last_ids[run] = step_id
        return step_id

    def _prune(self) -> None:
        now = self.cluster.clock.now()
        for key, step in list(self.steps.items()):
            if step.end_time is not None and now - step.end_time > KEEP_ENDED_SECONDS:
                del self.steps[key]
        live = (JobState.RUNNING, JobState.SUSPENDED)
        for job_id, attempt in list(self._last_ids):  # a job that runs again reads anew
            job = self.cluster.jobs.get(job_id)
            if job is None or job.state not in live or job.restarts != attempt:
                del self._last_ids[(job_id, attempt)]
        for job_id, lock in list(self._giving.items()):
            job = self.cluster.jobs.get(job_id)
            if not lock.locked() and (job is None or job.state not in live):
                del self._giving[job_id]
        for job_id, restarts in list(self.signalled):
            job = self.cluster.jobs.get(job_id)
            if job is None or job.state not in live or job.restarts != restarts:
                self.signalled.discard((job_id, restarts))


def _ending_words(job: Job) -> str | None:
    """slurmstepd's reason on the ``STEP`` lines of a job ending now ("" for a cancel,
    ``DUE TO TIME LIMIT``), or None where it writes none (a requeue, a preemption)."""
    if job.state is JobState.COMPLETING:  # scancel's, until the agent has ended it
        return "" if job.cancelled_by is not None else None
    return ENDED_SAYING.get(job.state)


def _key(step: Step) -> Key:
    return (step.job_id, step.attempt, step.step_id)


def _row(step: Step) -> RunningStepRow:
    return running_row(
        step.job_id,
        step.step_id,
        step.attempt,
        step.name,
        step.layout,
        step.start_time,
        step.ended,
        step.oom,
        step.local,
        step.totals,
        step.gpus,
        step.gpu_ids,
        step.cpus,
        step.srun,
        step.memory,
        step.cancelled_at,
        step.cancelled_by,
        step.times,
        None if step.relay is None else step.relay.readers,
    )


def _decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return b""
