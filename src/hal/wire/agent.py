"""The agent channel: how node agents and the control plane talk.

Agents initiate every exchange (they may sit behind NAT):

- ``POST /v1/agent/register`` (``AgentRegister`` → ``AgentRegistered``) when the agent
  starts or after the server forgot it; it lists the jobs it still supervises so a restart
  neither orphans nor duplicates them.
- ``POST /v1/agent/{node}/sync`` (``AgentSync`` → ``AgentInstructions``): a long poll. The
  agent reports what happened since the last sync (job started, exited, ...) and the server
  answers, as soon as it has any or after ``wait_seconds``, with instructions. Each sync is
  also the heartbeat. Reports carry a per-agent sequence number; the server acknowledges the
  highest it has stored, and the agent resends anything unacknowledged, so a lost response
  loses nothing (reports are idempotent by ``(job_id, kind, attempt)``).

Instructions travel the same way the other way round. The server numbers each node's
instructions (``AgentInstructions.first_id``: the number of the first in the list, the
rest follow one by one, from ``AgentRegistered.instructions_from`` on); every sync says
which the agent has applied (``AgentSync.applied``) and every reply carries all it has
not, oldest first. So an instruction in a lost reply comes again, and one in a reply that
overtook an older reply (two syncs may be in flight) waits for those before it: the agent
applies each once, in the order the server gave them. An agent that sends no ``applied``
(before numbering) gets each instruction once, in one reply, as before.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from hal.wire.base import WireModel
from hal.wire.bounds import INT32_MAX, INT64_MAX
from hal.wire.jobs import GpuUsage, JobProfileSample
from hal.wire.steps import TaskTotals

NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"  # what a node may be called


class AgentRegister(WireModel):
    node: str = Field(pattern=NODE_NAME)
    cpus: int = Field(ge=1, le=INT32_MAX)
    memory_bytes: int = Field(ge=1, le=INT64_MAX)
    gpus: int = Field(default=0, ge=0, le=1024)  # as a job's --gpus-per-node
    gpu_model: str = Field(default="", max_length=256)  # the column's size (PostgreSQL)
    gpu_islands: list[list[int]] = Field(default_factory=list)  # NVLink; [] = one
    # rack/zone/region/site (core.topology_labels); the config's [[topology.labels]] win
    topology_labels: dict[str, str] = Field(default_factory=dict)
    nvlink_domain: str = Field(default="", max_length=256)  # multi-node NVLink domain
    features: list[str] = Field(default_factory=list)
    address: str = Field(default="", max_length=512)
    version: str = ""
    isolation: str = ""  # cgroup2, cgroup1, rlimit
    running: list[RunningJob] = Field(default_factory=list)
    # job steps' tasks still running here (ADR 0012): an agent that registers again
    # without restarting (its server restarted, or forgot the node) still runs them
    steps: list[RunningStep] = Field(default_factory=list)


class RunningJob(WireModel):
    job_id: int
    attempt: int  # the job's restart count when it was launched
    pid: int


class RunningStep(WireModel):
    job_id: int
    step_id: int
    # the job's run the step belongs to (its restarts; each run numbers its steps from
    # 0): None from an agent before it was sent, whose step ids never repeat in a job
    attempt: int | None = Field(default=None, ge=0)


class AgentRegistered(WireModel):
    node: str
    heartbeat_interval_seconds: float
    node_timeout_seconds: float
    kill_wait_seconds: int
    kill: list[int] = Field(default_factory=list)  # supervised jobs the server does not want
    # step tasks the server does not know running there (it restarted): ended, as their
    # job's steps would be (SIGTERM, SIGKILL after kill_wait_seconds)
    kill_steps: list[RunningStep] = Field(default_factory=list)
    server_time: float
    # the number of this session's first instruction (0: a server that does not number)
    instructions_from: int = Field(default=0, ge=0)
    # [artifacts] node_cache: the bound of the node's artifact cache, over the agent's
    # --artifact-cache; None: the agent keeps its own
    artifact_cache_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)


class JobReport(WireModel):
    """Something that happened to a job on this node."""

    seq: int  # per agent process, increasing
    job_id: int
    attempt: int
    kind: Literal["started", "finished", "launch_failed"]
    time: float
    pid: int = 0
    # for "finished": the final state the agent observed and why
    state: str = ""  # COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED, NODE_FAIL ...
    exit_code: int = 0
    exit_signal: int = 0
    max_rss_bytes: int = 0
    cpu_seconds: float = 0.0
    # cpu_seconds' user and system parts (sacct's UserCPU, SystemCPU); None: not known
    # (an older agent measured only their sum)
    user_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    system_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    gpu: GpuUsage | None = None  # a job given GPUs: its samples' (``JobUsage.gpu``)
    message: str = ""


class JobUsage(WireModel):
    """What a running job's processes on this node use now (``sstat``), sampled by the
    agent every ``usage_interval_seconds``."""

    job_id: int
    attempt: int
    rss_bytes: int = Field(ge=0)  # resident memory now
    max_rss_bytes: int = Field(ge=0)  # the most of the samples so far
    cpu_seconds: float = Field(ge=0)  # user + system time so far
    # ... apart (sacct's UserCPU, SystemCPU of a running job); None: an older agent's
    user_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    system_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    gpu: GpuUsage | None = None  # a job given GPUs on an NVML node (``agent.gpuusage``)
    # its behaviour over the window since the agent's previous sample (``agent.profile``);
    # None: an older agent, or the job's first sample
    profile: JobProfileSample | None = None


class StepTaskUsage(WireModel):
    """What one task of a job step on this node uses now (``sstat -j JOB.N``), sampled
    with the jobs' usage (``JobUsage``): its process tree's memory and CPU time, and, for
    a step given GPUs on this node, what the tree does with them."""

    job_id: int
    step_id: int = Field(ge=0)
    # the job's run the step belongs to (its restarts; each run numbers its steps from
    # 0): None from an agent before it was sent, whose step ids never repeat in a job
    attempt: int | None = Field(default=None, ge=0)
    rank: int = Field(ge=0)
    rss_bytes: int = Field(ge=0, le=INT64_MAX)
    max_rss_bytes: int = Field(ge=0, le=INT64_MAX)  # the most of the samples so far
    cpu_seconds: float = Field(ge=0)
    # ... apart (its end's UserCPU, SystemCPU where this sample is its most); None: an
    # older agent's
    user_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    system_cpu_seconds: float | None = Field(default=None, ge=0, le=1e15)
    gpu: GpuUsage | None = None  # its GPU samples' tally (as ``JobUsage.gpu``); None: not read


class AgentSync(WireModel):
    reports: list[JobReport] = Field(default_factory=list)
    wait_seconds: float = Field(default=10.0, ge=0, le=60)
    running: list[int] = Field(default_factory=list)  # job ids currently supervised
    usage: list[JobUsage] = Field(default_factory=list)  # running jobs' latest samples
    # the host now (sinfo's FREE_MEM and CPU_LOAD): MemAvailable and the 1-minute load
    # average; None (an older agent, or /proc unreadable): unknown, shown as N/A
    free_memory_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    cpu_load: float | None = Field(default=None, ge=0, le=1e9)
    # the number of the last instruction applied (the agent has applied all before it);
    # None: an agent that does not number instructions
    applied: int | None = Field(default=None, ge=0)
    # job steps' task output and ends on this node (ADR 0012): sent until a reply comes,
    # so the server takes each byte once by its offset, and each end once
    step_output: list[StepOutput] = Field(default_factory=list)
    step_ends: list[StepEnd] = Field(default_factory=list)
    # srun -K steps whose task here failed (each sent until a reply comes): the server
    # ends the step's other tasks on every node; an older agent sends none
    step_bad_exits: list[StepBadExit] = Field(default_factory=list)
    # srun's relayed stdin: how far each reading task got (sent until a reply comes)
    step_input_fed: list[StepInputFed] = Field(default_factory=list)
    step_usage: list[StepTaskUsage] = Field(default_factory=list)  # running step tasks'
    # the GPUs' problems at the agent's last health read (``agent.gpuhealth``): the
    # server drains the node with them and resumes it when none are left; None: not
    # read (no NVML GPUs, checks off, or not read yet)
    gpu_problems: list[Annotated[str, Field(max_length=512)]] | None = Field(
        default=None, max_length=64
    )
    # running jobs' TCP traffic since the last report (``agent.traffic``): one entry per
    # job with sockets; an older agent, or one that cannot read sock_diag, sends none
    traffic: list[JobTraffic] = Field(default_factory=list, max_length=4096)
    # what the instance's metadata service says of the machine's fate (``agent.interruption``,
    # with ``--interruption-notice``): each notice sent until a reply comes
    notices: list[InterruptionNotice] = Field(default_factory=list, max_length=2)
    # the node's artifact cache (``hal artifact nodes``): sent when it changed, and
    # every ``CACHE_REPORT_S`` seconds; None: unchanged (or an older agent)
    artifact_cache: CacheReport | None = None


class InterruptionNotice(WireModel):
    """The provider will take the node's machine back (EC2 spot's instance action, about
    two minutes ahead), or says it is at raised risk of that (a rebalance
    recommendation); ``hal.state.interruptions`` drains the node and moves its jobs."""

    kind: Literal["interruption", "rebalance"]
    action: str = Field(default="", max_length=32)  # terminate, stop, hibernate; "": rebalance
    # Unix time: when the machine goes (an interruption), when the recommendation was made
    # (a rebalance)
    time: float = Field(ge=0, le=1e11)


class CachedCopy(WireModel):
    """A copy in a node's artifact cache: an artifact's content or a Python environment."""

    name: str = Field(max_length=80)  # its folder: SHA256, SHA256.program or SHA256.venv
    size: int = Field(ge=0, le=INT64_MAX)
    used: float  # when a job last deployed it
    held: bool = False  # a job on the node holds it


class CacheReport(WireModel):
    limit_bytes: int = Field(ge=0, le=INT64_MAX)
    copies: list[CachedCopy] = Field(default_factory=list, max_length=100_000)


class Endpoint(WireModel):
    """One end of a TCP connection, as the kernel names it (IPv4 or IPv6 text)."""

    address: str = Field(max_length=64)
    port: int = Field(ge=0, le=65535)


class JobFlow(WireModel):
    """One of a job's TCP connections on this node, and the bytes it carried since the
    agent's previous report (``tcp_info``'s ``bytes_acked``/``bytes_received``,
    differenced)."""

    local: Endpoint
    remote: Endpoint
    bytes_sent: int = Field(ge=0, le=INT64_MAX)
    bytes_received: int = Field(ge=0, le=INT64_MAX)


class JobTraffic(WireModel):
    """A running job's TCP traffic on this node over the last ``interval_seconds``: the
    addresses it listens on (so the server can tell which job owns the far end of
    another job's connection) and its connections with their bytes."""

    job_id: int
    attempt: int
    interval_seconds: float = Field(gt=0, le=86_400)
    listening: list[Endpoint] = Field(default_factory=list, max_length=256)
    flows: list[JobFlow] = Field(default_factory=list, max_length=1024)


class StepOutput(WireModel):
    """Bytes one task of a step wrote, at ``offset`` in its ``stream``."""

    job_id: int
    step_id: int = Field(ge=0)
    # the job's run the step belongs to (its restarts; each run numbers its steps from
    # 0): None from an agent before it was sent, whose step ids never repeat in a job
    attempt: int | None = Field(default=None, ge=0)
    rank: int = Field(ge=0)
    stream: Literal["stdout", "stderr"]
    offset: int = Field(ge=0)
    data_b64: str


class StepInputFed(WireModel):
    """How far one task of a step has been given srun's relayed stdin (``offset``);
    ``closed``: it takes no more (it ended, or closed its stdin)."""

    job_id: int
    step_id: int = Field(ge=0)
    attempt: int = Field(ge=0)
    rank: int = Field(ge=0)
    offset: int = Field(ge=0)
    closed: bool = False


class StepBadExit(WireModel):
    """srun -K (``--kill-on-bad-exit``): a task of the step here exited non-zero or was
    killed by a signal (``exit_code``: -N for a signal N) while the step ran; the agent
    has written srun's lines for it into the step's output, sent before."""

    job_id: int
    step_id: int = Field(ge=0)
    # the job's run the step belongs to (its restarts; each run numbers its steps from
    # 0): None from an agent before it was sent, whose step ids never repeat in a job
    attempt: int | None = Field(default=None, ge=0)
    rank: int = Field(ge=0)
    exit_code: int = Field(ge=-127, le=255)


class StepEnd(WireModel):
    """Every task of a step on this node has ended (its output is all sent before)."""

    job_id: int
    step_id: int = Field(ge=0)
    # the job's run the step belongs to (its restarts; each run numbers its steps from
    # 0): None from an agent before it was sent, whose step ids never repeat in a job
    attempt: int | None = Field(default=None, ge=0)
    exit_code: int = Field(ge=0, le=255)  # the highest task's; 128+N for a signal N
    # the signal N that ended the task of ``exit_code`` (0: it exited); an older agent
    # sends none, and its 128+N reads as an exit code
    exit_signal: int = Field(default=0, ge=0, le=127)
    oom: bool = False  # a task was killed for the job's memory limit on this node
    timed_out: bool = False  # its own time limit (srun -t) ended it here
    # what each task here used, by rank (sacct's MaxRSS, TotalCPU); an older agent: none
    tasks: list[TaskTotals] = Field(default_factory=list, max_length=1 << 16)


class ArtifactPin(WireModel):
    """A job's artifact: the agent fetches its content by ``sha256`` (GET
    /v1/agent/artifacts/SHA256), once per node, and checks it."""

    name: str
    version: str
    sha256: str
    kind: str = "program"  # "archive": unpacked; "program": kept as it is


class PythonEnvPin(WireModel):
    """A job's Python environment: the node builds it from ``files`` once per ``sha256``,
    or unpacks a conda-pack ``artifact`` once per ``sha256`` (its content's)
    (hal.core.pyenv, hal.agent.pyenvs, hal.agent.conda)."""

    kind: str  # "requirements", "uv" or "conda"
    sha256: str
    files: dict[str, str]  # file name -> content ({} for conda)
    artifact: ArtifactPin | None = None  # conda: the archive, fetched as artifacts are


class ContainerPin(WireModel):
    """A job's container (hal.core.container, hal.agent.containers): a published image
    (kind ``image``), or an OCI bundle folder on the node."""

    image: ArtifactPin | None = None
    bundle: str = ""


class Launch(WireModel):
    """Run a job's batch script on this node (the job's first node)."""

    op: Literal["launch"] = "launch"
    job_id: int
    attempt: int
    name: str
    user: str
    uid: int | None = None  # run as this Unix user when the agent is root
    gid: int | None = None
    script: str
    # the script's arguments, after its path in argv (an agent before them runs it without)
    script_args: list[str] = Field(default_factory=list)
    workdir: str
    environment: dict[str, str]  # the job's own variables (submitter's env + HAL/SLURM_*)
    stdout: str  # pattern ("" = Slurm's default), expanded on the node (%N, %n need it)
    stderr: str | None
    open_mode: str = ""  # "append": keep what earlier runs wrote; else truncate (Slurm's)
    time_limit_seconds: int  # 0 = unlimited
    memory_bytes: int  # on this node; 0 = not limited
    # SLURM_MEM_PER_NODE=memory_bytes in the job's environment: only where it asked
    # --mem=N above 0, as Slurm 22.05.8 (not --mem=0, --mem-per-cpu, --mem-per-gpu)
    mem_per_node_variable: bool = True
    cpus: int  # on this node
    gpu_ids: list[int] = Field(default_factory=list)  # on this node
    nodes: list[str]  # all nodes of the job, rank order
    node_index: int
    signal: str | None = None  # "[B:]SIG[@secs]" as submitted
    array_job_id: int | None = None
    array_task_id: int | None = None
    # --artifact: what the node deploys before it runs the job or a step of it
    artifacts: list[ArtifactPin] = Field(default_factory=list)
    # --python-env: the environment the node builds (or reuses) and activates for it
    python_env: PythonEnvPin | None = None
    # --container: the image (or bundle) the batch script and the steps run in
    container: ContainerPin | None = None
    # --feedback-metrics: "URL[#name,...]" the agent scrapes and reports as the job's
    # feedback (hal.agent.scrape); "": none
    feedback_metrics: str = ""
    # the environment's HAL_URL is the server's own address, put there because the
    # submitter exported none: the agent puts every server address it was given there
    # instead, the leader first (``hal.agent.environment.with_server_addresses``), so the
    # job's own commands follow the leader too. (An agent before it keeps the one.)
    hal_url_default: bool = False


class Signal(WireModel):
    op: Literal["signal"] = "signal"
    job_id: int
    signal: int
    batch_only: bool = False


class Cancel(WireModel):
    """End the job's ``attempt``: SIGTERM to its process group, SIGKILL after
    ``kill_wait_seconds``; the agent then reports ``finished`` with ``state``, at once for
    an attempt that never started on the node. ``attempt`` None (servers before it was
    sent): whichever attempt the node has."""

    op: Literal["cancel"] = "cancel"
    job_id: int
    state: str = "CANCELLED"  # CANCELLED, PREEMPTED, NODE_FAIL ...
    kill_wait_seconds: int = 30
    attempt: int | None = None


class Limit(WireModel):
    """The job's time limit changed (``scontrol update TimeLimit=``) while it runs: the
    agent ends it at the new one (0: unlimited), counted from its start as before."""

    op: Literal["limit"] = "limit"
    job_id: int
    attempt: int
    time_limit_seconds: int


class StepLaunch(WireModel):
    """Start this node's tasks of a job step (``srun`` in a job, ADR 0012): ``argv`` once
    per rank in ``ranks``, as the job's user, in its working directory. ``launch`` is the
    job as this node sees it (its index, CPUs, memory, GPUs; ``environment`` is srun's,
    whose node-local variables the agent replaces); ``environment`` adds the step's
    ``SLURM_STEP_*``. The agent reports the tasks' output and their end in its syncs."""

    op: Literal["step_launch"] = "step_launch"
    job_id: int
    step_id: int = Field(ge=0)
    launch: Launch
    argv: list[str] = Field(min_length=1)
    ranks: list[int] = Field(min_length=1)
    # srun --multi-prog: each rank's own command line, in ``ranks``' order ([]: ``argv``)
    rank_argv: list[list[str]] = Field(default_factory=list)
    step_node_index: int = Field(ge=0)  # SLURM_NODEID: the node's place in the step
    environment: dict[str, str] = Field(default_factory=dict)
    # the step's own GPUs on this node, of the job's (srun --gpus...); None: the job's
    gpu_ids: list[int] | None = None
    # srun --gpus-per-task: each task is bound to that many of them (None: not per task)
    gpus_per_task: int | None = None
    # the job's CPUs on this node the step holds, by their place among them (the agent
    # binds its tasks to those of the job's bound CPUs); None: all the job's (--overlap)
    cpus: list[int] | None = None
    # the step's memory on this node, its cgroup's limit (srun --mem...); 0: the job's
    memory_bytes: int = Field(default=0, ge=0)
    # srun -t: its own time limit (0: none), after which its tasks get SIGTERM, and
    # SIGKILL ``kill_wait_seconds`` later
    time_limit_seconds: int = Field(default=0, ge=0)
    kill_wait_seconds: int = Field(default=30, ge=0)
    # srun -K: the first task of the step to fail (on any node) ends the others: the
    # agent reports it at once (``AgentSync.step_bad_exits``) and the server ends the step
    kill_on_bad_exit: bool = False
    # srun -i FILE: the pattern of each task's stdin file (``StepCreate.input``; "": none)
    input: str = Field(default="", max_length=4096)
    # the ranks here that read srun's relayed stdin (``StepInput``; []: none, /dev/null)
    relay_ranks: list[int] = Field(default_factory=list)
    # srun --pty: rank 0 (when here) runs in a pseudo-terminal of [rows, columns], its
    # output as its stdout; []: none
    pty: list[int] = Field(default_factory=list, max_length=2)


class StepSignal(WireModel):
    """Signal a job's step tasks on this node: one step, or every step (``step_id``
    None). ``kill_wait_seconds`` set: the step is ending (its job ended, or it was
    cancelled): SIGCONT first and SIGKILL after that many seconds."""

    op: Literal["step_signal"] = "step_signal"
    job_id: int
    step_id: int | None = None
    signal: int = Field(ge=1, le=64)
    kill_wait_seconds: int | None = Field(default=None, ge=0)
    # scancel ended the step at this time (slurmstepd's "*** STEP J.S ON node CANCELLED
    # AT ... ***" line, which the agent writes into the step's output); "": not that
    cancelled_at: float | None = None
    reason: str = Field(default="", max_length=64)  # the line's "DUE TO TIME LIMIT"
    # a step srun runs on the batch node (its tasks are srun's children, in the step's
    # cgroup the agent kills or signals), and that srun, "PID:START" (without the cgroup
    # the agent signals srun, which passes the signal on)
    local: bool = False
    srun: str = Field(default="", max_length=64)
    # the job's run the step belongs to (its restarts: step ids repeat across runs; a
    # local step's cgroup's name); a server before runs keyed steps sent it for local
    # steps only, and its step ids never repeat in a job
    attempt: int = Field(default=0, ge=0)


class StepInput(WireModel):
    """srun's stdin for the step's tasks here that read it (``StepLaunch.relay_ranks``):
    bytes ``offset..`` (what the agent has is skipped: a repeat is harmless), ``eof``: the
    input ends after them; ``lost``: it ends where the agent has it (a restarted server
    lost the rest)."""

    op: Literal["step_input"] = "step_input"
    job_id: int
    step_id: int = Field(ge=0)
    attempt: int = Field(default=0, ge=0)
    offset: int = Field(default=0, ge=0, le=INT64_MAX)
    data_b64: str = ""
    eof: bool = False
    lost: bool = False
    # srun --pty: srun's terminal is now [rows, columns] (the task's is resized); []: same
    winsize: list[int] = Field(default_factory=list, max_length=2)


class Prefetch(WireModel):
    """Fetch a job's artifacts (and build its Python environment) now, on a node of its
    other than the batch node: its steps there then start without waiting for them
    (docs/user/artifacts.md, docs/user/environments.md)."""

    op: Literal["prefetch"] = "prefetch"
    job_id: int
    artifacts: list[ArtifactPin]
    python_env: PythonEnvPin | None = None
    container: ContainerPin | None = None  # its image fetched, checked and loaded


Instruction = Launch | Signal | Cancel | Limit | StepLaunch | StepInput | StepSignal | Prefetch


class AgentInstructions(WireModel):
    acked_seq: int  # the highest report seq the server has stored
    instructions: list[Instruction] = Field(default_factory=list)
    first_id: int = Field(default=0, ge=0)  # the number of instructions[0]; 0: not numbered
    server_time: float
    reregister: bool = False  # the server does not know this node: register again


AgentRegister.model_rebuild()
AgentSync.model_rebuild()
