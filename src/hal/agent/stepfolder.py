"""A job step part's folder on this node, ``<state dir>/steps/<job>.<run>.<step>``.

::

    launch.json      the StepLaunch (its mtime: when the keeper was started)      (agent)
    plan.json        the KeeperPlan: argv, environment, user, cgroup, ranks        (agent)
    made-job-group   this part made its job's cgroup here (no batch script)       (agent)
    stopped          its job is suspended: a task starting stops itself          (agent)
    timed-out        its own time limit came (its mtime: when)                    (agent)
    bad-exit         "rank code": the srun -K failure the agent said             (agent)
    input, input.end, winsize, input.wake, output.wake   srun's stdin (``step_input``)
    supervisor       "<pid> <start ticks>" of the keeper                       (launcher)
    tasks            "rank pid start-ticks" a line                                (keeper)
    out.<rank>, err.<rank>   each task's output; the agent appends its own lines to
                     err.<rank> (O_APPEND), so offsets stay the file's
    ends             "rank code" a line, as each task ends                        (keeper)
    fed              "rank offset" a line: how far each task read srun's input  (feeder)
    status.json      each task's exit code, most RSS and CPU seconds, once all ended

The folder holds what a restarted agent must know of the part (``read_adopted``): the
machine's ``StepRecord`` itself lives in memory. Root's alone (0700, files 0600): the
launch and the plan hold the job's environment. The format is read by agents of every
version since steps outlived their agent; a file a newer agent adds is one an older
folder lacks, and its reader says what that means.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from hal.agent.gpuusage import GpuTally
from hal.agent.handshake import PLAN_FILE, read_recorded, write_atomic
from hal.agent.step_input import make_wakes
from hal.agent.stepkeeper import (
    STOPPED_FILE,
    KeeperPlan,
    output_path,
    read_times,
    read_usage,
)
from hal.wire.agent import StepLaunch
from hal.wire.steps import TaskTotals

log = logging.getLogger("hal.agent")

READ_BYTES = 1 << 16
LAUNCH_FILE = "launch.json"  # the StepLaunch, for the next agent
MADE_FILE = "made-job-group"  # this step made its job's cgroup here (no batch script)
TIMED_OUT_FILE = "timed-out"  # its own time limit (srun -t) came: SIGTERM sent then
BAD_EXIT_FILE = "bad-exit"  # srun -K: "rank code" of the task whose failure was said


@dataclass(frozen=True, slots=True)
class Adoptable:
    """What an earlier agent left of one step part."""

    launch: StepLaunch
    plan: KeeperPlan
    keeper: tuple[int, int] | None  # its pid and start ticks (None: never recorded)
    began: float  # when its keeper was started
    timed_out_at: float | None  # when its own time limit came (None: not yet)
    failed: tuple[int, int] | None  # srun -K's failure said (rank, exit code)
    made_job_group: bool


def make_folder(folder: str) -> None:
    os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)  # steps/
    os.makedirs(folder, mode=0o700, exist_ok=True)


def write_folder(
    folder: str, launch: StepLaunch, plan: KeeperPlan, *, made: bool, stopped: bool
) -> None:
    """The part's folder, before its keeper is forked: a few small files, as the batch
    path writes a job's folder (in the loop: a worker thread would cost more). The launch
    and the plan are root's only, and whole or absent for the next agent
    (``read_adopted``)."""
    make_folder(folder)
    write_atomic(folder, LAUNCH_FILE, launch.model_dump_json())
    if made:
        open(os.path.join(folder, MADE_FILE), "w").close()
    if launch.relay_ranks:
        make_wakes(folder, bool(launch.pty))
    mark_stopped(folder, stopped)
    write_atomic(folder, PLAN_FILE, plan.to_json())


def mark_stopped(folder: str, stopped: bool) -> None:
    """``STOPPED_FILE`` while the job is suspended: the keeper's tasks that start then
    stop themselves before they run."""
    path = os.path.join(folder, STOPPED_FILE)
    with contextlib.suppress(OSError):  # (no folder yet: ``write_folder`` marks it)
        if stopped:
            open(path, "w").close()
        else:
            os.unlink(path)


def mark_timed_out(folder: str) -> None:
    with contextlib.suppress(OSError):  # (the next agent then times it out again)
        open(os.path.join(folder, TIMED_OUT_FILE), "w").close()


def mark_bad_exit(folder: str, rank: int, code: int) -> None:
    with contextlib.suppress(OSError):  # (the next agent then says it again)
        write_atomic(folder, BAD_EXIT_FILE, f"{rank} {code}\n")


def append_output(folder: str, rank: int, stream: str, data: bytes) -> bool:
    """The agent's own lines (srun's and slurmstepd's), added to the task's output file as
    its output is (``O_APPEND``): what the agent sends stays at the file's offsets, so an
    agent restarted later reads them there again, and the server, which keeps what it
    took by offset, takes neither less nor twice. False when the agent's disk refused."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    try:
        make_folder(folder)
        fd = os.open(output_path(folder, rank, stream), flags, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as err:
        log.warning("step output folder %s: %s", folder, err)
        return False
    return True


def read_output(folder: str, rank: int, stream: str, offset: int) -> bytes:
    """What the task's output file holds from ``offset`` on (b"": nothing, or no file)."""
    try:
        fd = os.open(output_path(folder, rank, stream), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    chunks = []
    try:
        while data := os.pread(fd, READ_BYTES, offset):
            chunks.append(data)
            offset += len(data)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_adopted(folder: str) -> Adoptable | None:
    """The part an earlier agent left in ``folder``; None (and the folder removed) when
    its launch or plan is unreadable: that agent stopped while writing them, before any
    keeper was told to start."""
    try:
        with open(os.path.join(folder, LAUNCH_FILE)) as f:
            launch = StepLaunch.model_validate_json(f.read())
        with open(os.path.join(folder, PLAN_FILE)) as f:
            plan = KeeperPlan.from_json(f.read())
        began = os.stat(os.path.join(folder, LAUNCH_FILE)).st_mtime
    except (OSError, ValueError) as err:
        log.warning("step folder %s left unadopted and removed: %s", folder, err)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    try:
        timed_out_at: float | None = os.stat(os.path.join(folder, TIMED_OUT_FILE)).st_mtime
    except OSError:
        timed_out_at = None
    return Adoptable(
        launch=launch,
        plan=plan,
        keeper=read_recorded(folder),
        began=began,
        timed_out_at=timed_out_at,
        failed=_read_bad_exit(folder),
        made_job_group=os.path.exists(os.path.join(folder, MADE_FILE)),
    )


def _read_bad_exit(folder: str) -> tuple[int, int] | None:
    try:
        with open(os.path.join(folder, BAD_EXIT_FILE)) as f:
            rank, code = f.read().split()
        return int(rank), int(code)
    except (OSError, ValueError):
        return None


def task_totals(
    folder: str,
    ranks: list[int],
    sampled: Mapping[int, tuple[int, float]],
    sampled_times: Mapping[int, tuple[float, float]],
    gpu: Mapping[int, GpuTally],
) -> tuple[TaskTotals, ...]:
    """What each ended task used: the most of what the keeper's ``wait4`` saw (one
    process's peak, and the CPU of the children it waited for) and the agent's latest
    sample (``sampled``: its whole tree's memory; lost with an agent restart), and its GPU
    samples' tally (the same). The CPU seconds' user and system parts are those of the
    figure taken, ``wait4``'s or the sample's."""
    waited = read_usage(folder)
    times = read_times(folder)
    totals = []
    for rank in ranks:
        seen = [u for u in (waited.get(rank), sampled.get(rank)) if u is not None]
        if seen:
            rss, cpu = max(u[0] for u in seen), max(u[1] for u in seen)
            tally = gpu.get(rank)
            user = system = None
            if rank in waited and waited[rank][1] >= cpu:
                user, system = times.get(rank, (None, None))  # (an older keeper: none)
            elif rank in sampled_times:
                user, system = sampled_times[rank]
            totals.append(
                TaskTotals(
                    rank=rank,
                    max_rss_bytes=rss,
                    cpu_seconds=cpu,
                    user_cpu_seconds=user,
                    system_cpu_seconds=system,
                    gpu=tally.usage() if tally is not None else None,
                )
            )
    return tuple(totals)
