"""``/v1/jobs/{id}/steps``: job steps, as ``srun`` inside a job creates and follows them
(ADR 0012)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hal.wire.base import WireModel
from hal.wire.bounds import INT32_MAX, INT64_MAX
from hal.wire.jobs import GpuUsage

MAX_WAIT_SECONDS = 25.0  # under the clients' 30 s timeout


class MultiProgFile(WireModel):
    """``srun --multi-prog CONF``'s file: its name (for messages) and its text."""

    name: str = Field(max_length=4096)
    text: str = Field(max_length=1 << 20)


class StepCreate(WireModel):
    """srun's request: what to run and where (``None``: srun's defaults in a job)."""

    argv: list[str] = Field(min_length=1, max_length=4096)
    nodes: int | None = Field(default=None, ge=1, le=INT32_MAX)  # -N
    ntasks: int | None = Field(default=None, ge=1, le=INT32_MAX)  # -n
    ntasks_per_node: int | None = Field(default=None, ge=1, le=INT32_MAX)
    nodelist: list[str] = Field(default_factory=list)  # -w, expanded
    name: str = Field(default="", max_length=256)
    # the tasks' working directory: srun's (or its -D); "" (an older srun): the job's
    workdir: str = Field(default="", max_length=4096)
    # srun's environment, which the tasks get (the node-local variables each agent sets)
    environment: dict[str, str] = Field(default_factory=dict)
    # srun --export other than ALL: ``environment`` is all the tasks get of srun's and the
    # submitter's variables (the job's SLURM_*/HAL_* ones still come from the job)
    only_environment: bool = False
    distribution: str = Field(default="", max_length=64)  # -m, as written
    # srun --multi-prog: the file srun read (``argv``: its name and the arguments after it)
    multi_prog: MultiProgFile | None = None
    # the step's own GPUs (srun --gpus, --gpus-per-node or --gres=gpu:N, --gpus-per-task;
    # None: not asked, the job's GPUs on each node); a step whose GPUs are held by other
    # steps is refused with the field ``step_busy``, and srun asks again
    gpus: int | None = Field(default=None, ge=0, le=INT32_MAX)
    gpus_per_node: int | None = Field(default=None, ge=0, le=INT32_MAX)
    gpus_per_task: int | None = Field(default=None, ge=0, le=INT32_MAX)
    # the job's CPUs it holds while it runs, as Slurm 22.05's steps: all of them on its
    # nodes; with ``exact`` (srun --exact, --exclusive) or ``cpus_per_task`` (-c) only
    # its tasks'; with ``overlap`` none. A step whose CPUs other steps hold is refused
    # with the field ``step_busy`` too, and srun asks again
    cpus_per_task: int | None = Field(default=None, ge=1, le=INT32_MAX)
    exact: bool = False
    overlap: bool = False
    # the job's memory it holds on each node, in bytes (srun --mem; 0: all the job's
    # there) or per CPU it holds (--mem-per-cpu); neither: the job's --mem-per-cpu for
    # each of its CPUs, else all the job's memory. Held unless ``overlap``; a step whose
    # memory other steps hold is refused with the field ``step_busy`` too
    mem_per_node: int | None = Field(default=None, ge=0, lt=1 << 63)
    mem_per_cpu: int | None = Field(default=None, ge=1, lt=1 << 63)
    # srun -t: the step's own time limit in seconds (0: the job's alone); its tasks get
    # SIGTERM there, SIGKILL KillWait later, as Slurm's
    time_limit_seconds: int = Field(default=0, ge=0, le=INT32_MAX)
    # srun -K: a task that exits non-zero (or is killed by a signal) on any node ends the
    # step's other tasks (SIGTERM, SIGKILL KillWait later), as Slurm's
    kill_on_bad_exit: bool = False
    # srun -i FILE: the file-name pattern each task reads as its stdin, expanded (%t, %n,
    # %N, %s, %j...) and opened on the task's node as its user; "": none (/dev/null)
    input: str = Field(default="", max_length=4096)
    # srun's own standard input, relayed to the tasks (``-i all``, the default, or ``-i
    # N``: ``input_rank``): srun sends it (``StepInputChunk``) where there is something to
    # relay (its stdin is not /dev/null or closed); False: the tasks read /dev/null
    relay_input: bool = False
    input_rank: int | None = Field(default=None, ge=0, le=INT32_MAX)
    # srun --pty on a terminal: its [rows, columns]; task 0 runs in a pseudo-terminal of
    # that size (its stdin, stdout and stderr), which needs relay_input and input_rank 0
    pty: list[int] | None = Field(default=None, min_length=2, max_length=2)
    # a local step's srun, "PID:START" (its start in clock ticks after boot, as
    # /proc/PID/stat has it): another srun on the node that finds the step's CPUs held
    # and that process gone ends the step (its srun was killed before it could)
    srun: str = Field(default="", max_length=64)
    # a step srun runs on the batch node itself: only recorded (numbered, its end kept for
    # sacct), no agent runs it; ``nodelist`` names that node, ``ntasks`` its tasks
    local: bool = False


class TaskUsage(WireModel):
    """A running step task's latest sample from its agent (``sstat``)."""

    rank: int
    node: str
    rss_bytes: int
    max_rss_bytes: int
    cpu_seconds: float
    # the batch step of a job given GPUs (``JobInfo.gpu_usage``), or a step task given
    # GPUs on its node (``StepTaskUsage.gpu``)
    gpu: GpuUsage | None = None


class TaskTotals(WireModel):
    """What one ended task of a step used (sacct's MaxRSS, TotalCPU of ``JOB.N``): its
    process tree's most resident memory (0: not measured) and its CPU seconds, user and
    system, of it and the children it waited for; and its GPU use where it had GPUs."""

    rank: int = Field(ge=0, le=INT32_MAX)
    max_rss_bytes: int = Field(default=0, ge=0, le=INT64_MAX)
    cpu_seconds: float = Field(default=0.0, ge=0, le=1e15)
    # cpu_seconds' user and system parts (sacct's UserCPU, SystemCPU); None: not known
    # (an older agent or srun, or a figure taken from the agent's samples)
    user_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    system_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    # a task of a step given GPUs on its node, whose agent read them: its samples' tally
    # (the most memory and utilisation, the mean utilisation); None: not read
    gpu: GpuUsage | None = None


class StepInfo(WireModel):
    job_id: int
    step_id: int
    name: str
    nodes: list[str]
    tasks: list[int]  # per node
    state: str  # RUNNING, COMPLETED, FAILED, CANCELLED, OUT_OF_MEMORY
    exit_code: int
    usage: list[TaskUsage] = Field(default_factory=list)  # sampled tasks (sstat), by rank
    start_time: float = 0.0
    local: bool = False  # run by srun on the batch node: its tasks are not sampled apart
    srun: str = ""  # a local step's srun process, "PID:START" (``StepCreate.srun``)
    # the job's CPUs it holds on each node, by their place among the job's CPUs there
    # (srun binds a local step's tasks to them); a node not listed: all (--overlap)
    cpus: dict[str, list[int]] = Field(default_factory=dict)
    cpu_count: int = 0  # its CPUs in all (scontrol show step's CPUs=)
    memory_bytes: int = 0  # its memory in all (scontrol show step's TRES mem=)
    cancelled_at: float | None = None  # when scancel, or its job's end, ended it
    # why, in slurmstepd's words: "" (cancelled) or "DUE TO TIME LIMIT" (its job's)
    cancel_reason: str = ""


class StepList(WireModel):
    steps: list[StepInfo]


class StepChunk(WireModel):
    rank: int
    stream: Literal["stdout", "stderr"]
    data_b64: str


class StepOutputPage(WireModel):
    """Output past the cursor srun sent; ``cursor``: what to send next. ``state`` is no
    longer RUNNING once every node's tasks have ended and all their output is here."""

    chunks: list[StepChunk]
    cursor: int
    state: str
    exit_code: int
    dropped_bytes: int = 0  # output dropped unread (the server keeps 16 MiB per step)
    # scancel or its job's end ended it: srun says "Job step aborted", as Slurm's does
    cancelled_at: float | None = None
    cancel_reason: str = ""  # "" or "DUE TO TIME LIMIT" (slurmstepd's STEP line)
    job_cancelled: bool = False  # its job was cancelled (srun's "forcing job termination")
    # srun -K: a task's failure ended it (``cancelled_at``): srun's lines for that are in
    # the output; srun ends with "Force Terminated", not "Job step aborted"
    bad_exit: bool = False
    kill_wait_seconds: int = 30  # the cluster's KillWait (srun's "Waiting up to N seconds")


class StepSignalRequest(WireModel):
    signal: int = Field(ge=1, le=64)


class StepCancelRequest(WireModel):
    """``scancel JOB.STEP``: end the step (its tasks are killed, it ends CANCELLED), or
    with ``signal`` (``scancel -s SIG JOB.STEP``) only send that to its tasks."""

    signal: int | None = Field(default=None, ge=1, le=64)


class StepClose(WireModel):
    """srun's report of a step it ran on the batch node itself (``StepCreate.local``):
    its highest task exit code (128+N for a signal N), that signal, whether the job's
    cgroup counted an OOM kill while it ran, whether srun passed SIGINT/SIGTERM on to
    its tasks (the step was cancelled, as a forwarded one is), and what each task used
    (``wait4`` of srun's children; an older srun sends none)."""

    exit_code: int = Field(ge=0, le=255)
    exit_signal: int = Field(default=0, ge=0, le=64)
    oom: bool = False
    cancelled: bool = False
    timed_out: bool = False  # its own time limit (srun -t) ended it (sacct's TIMEOUT)
    tasks: list[TaskTotals] = Field(default_factory=list, max_length=1 << 16)  # by rank


MAX_INPUT_CHUNK = 1 << 20  # srun's input per request, in bytes (before base64)


class StepInputChunk(WireModel):
    """``POST .../steps/{n}/input``: srun's stdin bytes ``offset..`` (a resend of bytes
    the server has is skipped), and with ``eof`` its end after them. ``kept``: srun
    holds its input from there on, so a restarted server can ask for it again; a request
    with ``eof`` and nothing new waits for the tasks to take more (srun learns, from
    ``given``, what it may drop)."""

    offset: int = Field(ge=0, le=INT64_MAX)
    data_b64: str = Field(default="", max_length=(MAX_INPUT_CHUNK // 3 + 1) * 4)
    eof: bool = False
    kept: int | None = Field(default=None, ge=0, le=INT64_MAX)
    # srun --pty: srun's terminal is now [rows, columns] (SIGWINCH); the step's follows
    winsize: list[int] | None = Field(default=None, min_length=2, max_length=2)


class StepInputReply(WireModel):
    """What the server has of srun's input: every byte before ``offset`` (srun sends on
    from there, again from there where it is below srun's; the server holds the request
    while its buffer is full). ``given``: every task has been given the bytes before it
    (srun may drop them; None from a server that does not say). ``closed``: no task
    reads more of it (they ended or closed their stdin), srun stops sending; ``lost``: a
    restarted server no longer has it, and the tasks got its end."""

    offset: int
    given: int | None = None
    closed: bool = False
    lost: bool = False
