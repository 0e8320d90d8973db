"""Job submission and job views (REST ``/v1/jobs``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from hal.wire.base import WireModel
from hal.wire.bounds import INT32_MAX, INT64_MAX, LATEST_SECONDS
from hal.wire.submit import JobSubmit, SubmitResult, WillRun, bind_limits

bind_limits()  # pydantic evaluates JobSubmit's annotations below

__all__ = [
    "BatchSubmitResult",
    "GpuUsage",
    "HetSubmit",
    "HetSubmitResult",
    "JobBatchSubmit",
    "JobEvent",
    "JobInfo",
    "JobList",
    "JobProfileSample",
    "JobSubmit",
    "JobUpdate",
    "SubmitResult",
    "WillRun",
]


class GpuUsage(WireModel):
    """What a job's processes do with its GPUs, read through NVML per process and summed
    over the GPUs (Slurm's ``gres/gpumem`` and ``gres/gpuutil``): now, the most of the
    samples so far, and their mean utilisation."""

    mem_bytes: int = Field(ge=0, le=INT64_MAX)  # GPU memory held now
    max_mem_bytes: int = Field(ge=0, le=INT64_MAX)
    util: int = Field(ge=0, le=INT64_MAX)  # percent of one GPU's SMs, summed: 2 busy = 200
    max_util: int = Field(ge=0, le=INT64_MAX)
    ave_util: float = Field(ge=0)


MAX_RATE = 1e13  # bytes a second: 80 Tb/s, above any node's disks or links
MAX_CPUS_BUSY = 1e5  # CPUs busy: above any node's CPU count
ProfileSource = Literal["cgroup2", "cgroup1", "proc"]  # where a profile's figures came from


class JobProfileSample(WireModel):
    """How a running job behaved on its batch node over the agent's last sampling window
    (``hal.agent.profile``; docs/harmonic.md, Profiles): rates per second over the
    window, resident memory now, and pressure-stall shares where the kernel has them."""

    interval_seconds: float = Field(gt=0, le=86_400)  # the window the rates are over
    # where the figures come from: "cgroup2" (the job's cgroup, or a hybrid host's
    # accounting cgroup: CPU and pressure; I/O where it has io.stat, else /proc),
    # "cgroup1" (the job's memory cgroup; CPU and I/O from /proc) or "proc" (its processes)
    source: ProfileSource
    cpu_util: float = Field(ge=0, le=MAX_CPUS_BUSY)  # CPUs busy (1.0: one CPU all the time)
    rss_bytes: int = Field(ge=0, le=INT64_MAX)  # its processes' resident memory, summed
    # the job cgroup's memory charge (page cache included): memory.current or cgroup1's
    # memory.usage_in_bytes; None: no memory cgroup
    memory_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    read_bytes_per_s: float = Field(ge=0, le=MAX_RATE)  # from storage (not page cache hits)
    write_bytes_per_s: float = Field(ge=0, le=MAX_RATE)  # to storage
    # TCP sent + received by its sockets (the traffic telemetry's last read); None: not
    # attributed (telemetry off or unreadable)
    net_bytes_per_s: float | None = Field(default=None, ge=0, le=MAX_RATE)
    # the share of the window (0..1) some task of the job stalled on the CPU, memory or
    # I/O (pressure-stall "some"); None: no cgroup2 pressure files for the job
    cpu_pressure: float | None = Field(default=None, ge=0, le=1)
    memory_pressure: float | None = Field(default=None, ge=0, le=1)
    io_pressure: float | None = Field(default=None, ge=0, le=1)


class StepGpuUsage(WireModel):
    """What an ended step's tasks did with their GPUs (sacct's ``gres/gpumem`` and
    ``gres/gpuutil`` of ``JOB.N``, as Slurm's gpu/nvml per task): the most of one task
    (TRESUsageInMax) and the mean over the tasks (TRESUsageInAve) of each one's most
    memory and of its mean utilisation."""

    max_mem_bytes: int = Field(ge=0, le=INT64_MAX)
    ave_mem_bytes: int = Field(ge=0, le=INT64_MAX)
    max_util: int = Field(ge=0, le=INT64_MAX)
    ave_util: float = Field(ge=0)


class JobBatchSubmit(WireModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    jobs: list[JobSubmit] = Field(min_length=1, max_length=100_000)


class BatchSubmitResult(WireModel):
    results: list[SubmitResult]


class HetSubmit(WireModel):
    """``POST /v1/jobs/het``: the components of one heterogeneous job, in order."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    components: list[JobSubmit] = Field(min_length=2, max_length=128)


class HetSubmitResult(WireModel):
    """The het job id (component 0's id) and every component's id (consecutive)."""

    job_id: int
    component_ids: list[int]


class JobInfo(WireModel):
    id: int
    display_id: str
    # a component of a heterogeneous job: the het job id (component 0's id), this
    # component's offset and every component's id, e.g. "200-201" (Slurm's HetJobIdSet)
    het_job_id: int | None = None
    het_job_offset: int | None = None
    het_job_id_set: str | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_running: int = 0
    name: str
    user: str
    account: str | None = None
    qos: str | None = None
    partition: str
    state: str  # JobState name
    state_code: str  # two-letter code
    reason: str
    priority: int
    nice: int = 0
    submit_time: float
    # when it became eligible (its submission or begin time, a hold released, a dependency
    # met, its last requeue), kept once it starts; a pending job's begin time while that
    # is ahead, as Slurm's EligibleTime; None: unknown (held, or waiting on a dependency)
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    deadline: float | None = None  # --deadline (scontrol's Deadline=)
    burst_after: str = ""  # --burst-after ("": the QoS's, partition's or [cloud]'s)
    expected_start: float | None = None
    # The run time the scheduler plans with (the server's predictor, capped at the time
    # limit, corrected once a running job outlives it) and the end it implies: start +
    # that for a running job, expected_start + that for a pending one; None without any
    # estimate (no time limit, nothing learnt). Only in ``GET /v1/jobs/{id}`` (``hal
    # show``); never a limit: jobs run to their time limit.
    predicted_runtime_seconds: float | None = None
    predicted_end: float | None = None
    time_limit_seconds: int  # 0 = unlimited
    nodes: list[str] = Field(default_factory=list)
    node_count: int
    cpus: int
    memory_bytes: int
    # --mem=0 (or --mem-per-cpu=0): all of each node's memory, shown as MinMemoryNode=0
    memory_whole_node: bool = False
    gpus: int
    ntasks: int
    cpus_per_task: int
    min_cpus_per_node: int = 0  # --mincpus (scontrol's MinCPUsNode, squeue's %c)
    exit_code: int = 0
    exit_signal: int = 0
    # the batch step's peak resident memory and CPU time: measured at its end, or so far
    # (its agent's latest sample, at ``usage_time``) while it runs; ``rss_bytes``: its
    # resident memory at that sample (``sstat``)
    max_rss_bytes: int = 0
    cpu_seconds: float = 0.0
    # cpu_seconds' user and system parts (sacct's UserCPU and SystemCPU of the batch
    # step), at its end or so far; None: not known (an older agent said only the sum)
    user_cpu_seconds: float | None = None
    system_cpu_seconds: float | None = None
    rss_bytes: int | None = None
    usage_time: float | None = None
    # the same of its GPUs, for a job given GPUs once its agent sampled them (None: none)
    gpu_usage: GpuUsage | None = None
    # a running job's behaviour at its agent's latest sample (``hal show``'s Profile);
    # None: not running, or not sampled over a window yet
    profile: JobProfileSample | None = None
    # the class its profile last put it in (cpu, memory, io, network, light), kept after
    # it ends; None: never classed
    profile_class: str | None = None
    # asked to be protected from noisy neighbours first (--latency-sensitive, or its QoS)
    latency_sensitive: bool = False
    # --malleable: its range ("nodes=2-8", "cpus=4-16"); the feedback controller's last
    # resize or move of it and why (docs/feedback.md)
    malleable: str | None = None
    feedback_action: str | None = None
    workdir: str
    # the script's file and arguments as submitted (``scontrol show job``'s Command=);
    # None: read from stdin, ``--wrap`` or sent without a path
    script_path: str | None = None
    script_args: list[str] = Field(default_factory=list)
    stdout: str
    stderr: str
    dependency: str | None = None
    # what is left of a pending job's dependency, each condition with its status, as
    # Slurm shows it: "afterok:5(unfulfilled),afterok:6(failed)"; None once it holds
    dependency_state: str | None = None
    requeue: bool = True
    restarts: int = 0
    # the state its last run ended in when the server put it back in the queue (PREEMPTED,
    # NODE_FAIL); None: never requeued, or requeued by an administrator
    requeued_after: str | None = None
    preempt_time: float | None = None  # when it was last chosen as a preemption victim
    # its run was ended by a provider's interruption notice, which the server had then
    interrupted_at: float | None = None
    # seconds of work its run lost as it ended PREEMPTED or NODE_FAIL (sacct's LostWork):
    # its elapsed time, less what a checkpoint at its --signal saved; None: another end
    lost_work_seconds: float | None = None
    # seconds spent suspended (scontrol suspend); run times (squeue TIME, sacct Elapsed)
    # leave them out, as Slurm's do
    suspended_seconds: float = 0.0
    comment: str = ""
    wckey: str = ""
    cancelled_by: str | None = None
    constraint: list[str] = Field(default_factory=list)
    req_nodes: list[str] = Field(default_factory=list)  # -w/--nodelist (ReqNodeList)
    exc_nodes: list[str] = Field(default_factory=list)  # -x/--exclude (ExcNodeList)
    exclusive: bool = False
    exclusive_user: bool = False  # --exclusive=user (OverSubscribe=USER)
    held: bool = False
    submit_host: str = ""
    switches: int = 0  # --switches count (0: no limit)
    switch_wait_seconds: int | None = None  # --switches ...@max-time (None: the default)
    topology: str | None = None  # --topology, e.g. "required=leaf"
    # why the scheduler chose its nodes, when a plugin's choice decided them (the traffic
    # graph: "moved by the traffic graph (harmonic): 8.0 MB/s expected ..."); None: none
    placement: str | None = None
    data: list[str] = Field(default_factory=list)  # --data: input cache keys
    artifacts: list[str] = Field(default_factory=list)  # --artifact, pinned: NAME@VERSION
    artifact_digests: list[str] = Field(default_factory=list)  # NAME@VERSION=SHA256 of each
    artifact_aliases: list[str] = Field(default_factory=list)  # NAME@ALIAS=VERSION it named
    python_env: str | None = None  # --python-env: "requirements:SHA256" or "uv:SHA256"
    container: str | None = None  # --container, pinned: NAME@VERSION, or a bundle's path
    near: list[str] = Field(default_factory=list)  # --near rules, e.g. "job:12@node"
    feedback_goal: str = ""  # --feedback-goal, e.g. "samples_per_s:max,latency_ms:min"
    feedback_metrics: str = ""  # --feedback-metrics, e.g. "http://localhost:9100/metrics"
    apart: list[str] = Field(default_factory=list)  # --apart rules, e.g. "preferred=name:db@leaf"
    reservation: str = ""  # --reservation
    licenses: str = ""  # -L, as "ansys:1,matlab:2"
    time_min_seconds: int | None = None  # --time-min (None: none)
    mail_type: str = "NONE"  # --mail-type as Slurm shows it ("BEGIN,END"; "NONE")
    mail_user: str = ""  # where job mail goes (docs/user/mail.md)
    # a scrontab entry's job (docs/user/scrontab.md): its schedule as written ("*/5 * * * *",
    # "@daily"); scontrol shows CronJob=Yes CrontabSpec=...; None for any other job
    cron: str | None = None
    # an allocation salloc made (its script only holds the nodes): BatchFlag=0, as Slurm's
    interactive: bool = False
    # its job steps (srun in the job, ADR 0012): filled for history queries (sacct) only
    steps: list[StepRecord] = Field(default_factory=list)
    # the runs a requeue ended, oldest first: filled for history queries (sacct -D) only
    runs: list[JobRun] = Field(default_factory=list)
    # what its cloud nodes cost in this run, in USD (node-hours × their group's price at
    # its start): so far while it runs; None: it has not run on priced nodes
    cost: float | None = None


class StepRecord(WireModel):
    """A job step as accounting shows it (``sacct``'s ``JOB.N`` line)."""

    step_id: int
    # the job's run it started in (its restarts then; each run numbers its steps from
    # 0, as Slurm's); None from a server before it was sent, whose step ids go on across
    # runs (sacct then places a step by its start)
    attempt: int | None = None
    name: str
    nodelist: str  # Slurm's compressed form
    ntasks: int
    state: str
    exit_code: int  # the worst task's: its exit code, or 128+N for a signal N
    start_time: float
    end_time: float | None = None  # None: running
    exit_signal: int = 0  # the signal N that ended the worst task (sacct's 0:N); 0: exited
    # what its tasks used, once ended (0 and "": not measured; running: see sstat)
    max_rss_bytes: int = 0  # the most resident memory of one task (sacct's MaxRSS)
    max_rss_node: str = ""  # ... its node (MaxRSSNode)
    max_rss_task: int = 0  # ... its rank (MaxRSSTask)
    ave_rss_bytes: int = 0  # the tasks' mean of their most (AveRSS)
    total_cpu_seconds: float = 0.0  # user and system seconds of all its tasks (TotalCPU)
    # ... apart (UserCPU, SystemCPU); None: not known (a task's end without them)
    user_cpu_seconds: float | None = None
    system_cpu_seconds: float | None = None
    gpu: StepGpuUsage | None = None  # its tasks' GPU use; None: not read for GPUs
    # the job's CPUs and memory it was given (AllocCPUS, AllocTRES); 0: not recorded
    cpus: int = 0
    memory_bytes: int = 0
    cancelled_by: str | None = None  # who scancel'd it alone (sacct's "CANCELLED by UID")
    with_job: bool = False  # its job's end ended it (not in the job's DerivedExitCode)


class JobRun(WireModel):
    """An earlier run of a requeued job (``sacct -D``'s lines before the job's own)."""

    attempt: int  # the restart count it ran under (0: the first run)
    state: str  # how it ended: REQUEUED, PREEMPTED, NODE_FAIL, or its own end state
    exit_code: int
    exit_signal: int = 0
    partition: str
    submit_time: float
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float
    nodes: list[str] = Field(default_factory=list)
    cost: float | None = None  # what its cloud nodes cost (None: none)
    max_rss_bytes: int = 0  # what its batch script used (0: not measured)
    cpu_seconds: float = 0.0
    interrupted_at: float | None = None  # as JobInfo's
    lost_work_seconds: float | None = None


class JobList(WireModel):
    jobs: list[JobInfo]


class JobUpdate(WireModel):
    """Fields ``scontrol update job`` may change."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    time_limit_seconds: int | None = Field(default=None, ge=0, le=LATEST_SECONDS)
    time_min_seconds: int | None = Field(default=None, ge=0, le=LATEST_SECONDS)  # 0: none
    priority: int | None = Field(default=None, ge=0, le=INT64_MAX)
    nice: int | None = Field(default=None, ge=-10000, le=10000)
    name: str | None = Field(default=None, max_length=256)
    comment: str | None = Field(default=None, max_length=4096)
    partition: str | None = Field(default=None, max_length=256)
    reservation: str | None = Field(default=None, max_length=128)  # "": none
    # a pending job's request (``hal.state.pending_update``), checked as at submit;
    # None leaves a field as it is, "" (an empty list) clears it
    begin_time: float | None = Field(default=None, ge=0, le=LATEST_SECONDS)  # StartTime
    dependency: str | None = Field(default=None, max_length=4096)  # sbatch -d syntax
    qos: str | None = Field(default=None, max_length=256)
    account: str | None = Field(default=None, max_length=256)
    constraint: list[str] | None = Field(default=None, max_length=256)  # Features
    exclude: list[str] | None = Field(default=None, max_length=100_000)  # ExcNodeList
    nodelist: list[str] | None = Field(default=None, max_length=100_000)  # ReqNodeList
    # ArrayTaskThrottle: the array's %N, for all its elements (0: no limit)
    array_max_running: int | None = Field(default=None, ge=0, le=2**31 - 1)  # an INTEGER column
    # more of a pending job's request (NumNodes=MIN[-MAX], NumTasks, MinMemoryNode,
    # MinMemoryCPU, WorkDir, StdOut, StdErr, MailUser, MailType), checked as at submit
    nodes_min: int | None = Field(default=None, ge=1, le=100_000)
    nodes_max: int | None = Field(default=None, ge=1, le=100_000)
    ntasks: int | None = Field(default=None, ge=1, le=INT32_MAX)
    memory_per_node_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    memory_per_cpu_bytes: int | None = Field(default=None, ge=0, le=INT64_MAX)
    workdir: str | None = Field(default=None, min_length=1, max_length=4096)
    stdout: str | None = Field(default=None, min_length=1, max_length=4096)
    stderr: str | None = Field(default=None, min_length=1, max_length=4096)
    mail_user: str | None = Field(default=None, max_length=1024)
    mail_type: int | None = Field(default=None, ge=0, le=2**31 - 1)
    requeue: bool | None = None  # Requeue=0|1: of a job that has not ended


class JobEvent(WireModel):
    """One row of the event stream (``GET /v1/events``)."""

    id: int
    time: float
    kind: str  # job.submitted, job.started, job.finished, job.updated, node.updated, ...
    job_id: int | None = None
    node: str | None = None
    state: str | None = None
    data: dict[str, object] = Field(default_factory=dict)
