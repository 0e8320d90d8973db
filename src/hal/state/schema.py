"""Tables. Portable SQLAlchemy Core definitions for SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    false,
)

metadata = MetaData()

meta = Table(
    "hal_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("array_job_id", BigInteger, nullable=True),
    Column("array_task_id", BigInteger, nullable=True),
    Column("user_name", String(256), nullable=False),
    Column("name", String(256), nullable=False),
    Column("partition", String(256), nullable=False),
    Column("state", String(32), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("priority", BigInteger, nullable=False),
    Column("submit_time", Float, nullable=False),
    Column("eligible_time", Float, nullable=True),
    Column("start_time", Float, nullable=True),
    Column("end_time", Float, nullable=True),
    Column("time_limit", BigInteger, nullable=False),
    Column("exit_code", Integer, nullable=False, default=0),
    Column("exit_signal", Integer, nullable=False, default=0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("held_by_admin", Boolean, nullable=False, default=False),
    Column("priority_fixed", Boolean, nullable=False, default=False, server_default=false()),
    Column("cancelled_by", String(256), nullable=True),
    Column("allocation", Text, nullable=True),  # JSON
    Column("spec", Text, nullable=False),  # JSON of JobSpec without the script
    Column("script_id", BigInteger, nullable=False),  # job_scripts.id (shared by an array)
    Column("array_max_running", Integer, nullable=False, default=0),
    Column("launched", Boolean, nullable=False, default=False),  # the agent confirmed start
    Column("max_rss", BigInteger, nullable=False, default=0),
    Column("cpu_seconds", Float, nullable=False, default=0.0),
    # cpu_seconds' user and system parts (migration 25; NULL: not known, an older
    # agent's end or a job from before): sacct's UserCPU, SystemCPU of the batch step
    Column("user_cpu_seconds", Float, nullable=True),
    Column("system_cpu_seconds", Float, nullable=True),
    # JSON of job.extra less what the columns above hold (codec.MARK_FREE): the marks
    # a run carries (preemption, suspension, requeue), kept over a server restart
    Column("marks", Text, nullable=False, default="{}", server_default="{}"),
)
Index("ix_jobs_state", jobs.c.state)
Index("ix_jobs_array", jobs.c.array_job_id)
Index("ix_jobs_end", jobs.c.end_time)
Index("ix_jobs_name", jobs.c.name)

job_scripts = Table(
    "job_scripts",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("script", Text, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("time", Float, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("job_id", BigInteger, nullable=True),
    Column("node", String(256), nullable=True),
    Column("state", String(32), nullable=True),
    Column("data", Text, nullable=True),  # JSON
)
# [accounting] purge_events_after deletes the oldest events in batches (migration v7)
Index("ix_events_time", events.c.time)

nodes = Table(
    "nodes",
    metadata,
    Column("name", String(256), primary_key=True),
    Column("cpus", Integer, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("gpu_model", String(256), nullable=False, default=""),
    Column("features", Text, nullable=False, default="[]"),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("address", String(512), nullable=False, default=""),
    Column("last_heartbeat", Float, nullable=False, default=0.0),
    # node topology (migration v4): labels {"rack": "r1", ...}, the multi-node NVLink
    # domain and the GPU islands [[0, 1], [2, 3]], so they survive a server restart
    Column("topology_labels", Text, nullable=False, default="{}"),
    Column("nvlink_domain", String(256), nullable=False, default=""),
    Column("gpu_islands", Text, nullable=False, default="[]"),
    # who set the reason and when (migration v15): sinfo -R, scontrol show node; "" and
    # NULL for a reason stored before
    Column("reason_user", String(256), nullable=False, default="", server_default=""),
    Column("reason_time", Float, nullable=True),
)

users = Table(
    "users",
    metadata,
    Column("name", String(256), primary_key=True),
    Column("token_sha256", String(64), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("created", Float, nullable=False),
    # an agent's token (``hal user add NAME --agent``): accepted by /v1/agent only, for
    # the nodes of ``agent_nodes`` (a host list; "" for any node)
    Column("agent", Boolean, nullable=False, default=False, server_default=false()),
    Column("agent_nodes", Text, nullable=False, default="", server_default=""),
)

# advance reservations (``scontrol create reservation``); lists are JSON arrays
reservations = Table(
    "reservations",
    metadata,
    Column("name", String(256), primary_key=True),
    Column("start_time", Float, nullable=False),
    Column("end_time", Float, nullable=False),
    Column("nodes", Text, nullable=False),
    Column("users", Text, nullable=False, default="[]"),
    Column("accounts", Text, nullable=False, default="[]"),
    Column("flags", Text, nullable=False, default="[]"),
    Column("partition", String(256), nullable=False, default=""),
)

# submissions sent with an ``Idempotency-Key`` (docs/architecture.md): the same user sending the
# same key again gets the jobs of the first request instead of new ones. ``result`` is
# JSON [[job id, number of array tasks], ...]; rows older than a day are deleted.
submit_keys = Table(
    "submit_keys",
    metadata,
    Column("user_name", String(256), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("digest", String(64), nullable=False),  # sha256 of the route and the body
    Column("created", Float, nullable=False),
    Column("result", Text, nullable=False),
)
Index("ix_submit_keys_created", submit_keys.c.created)

# job steps (``srun`` inside a job, ADR 0012), written when a step ends: sacct's
# ``JOB.N`` rows. Running steps live in the server's memory (``hal.state.steps``).
job_steps = Table(
    "job_steps",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    # the run of the job it started in (the job's restarts then; migration 26): each run
    # numbers its steps from 0, as Slurm's; steps recorded before have the run sacct -D
    # showed them under (``migrations._v26_step_runs``)
    Column("attempt", Integer, primary_key=True, default=0, server_default="0"),
    Column("step_id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("nodelist", Text, nullable=False),
    Column("ntasks", Integer, nullable=False),
    Column("state", String(32), nullable=False),
    Column("exit_code", Integer, nullable=False),
    Column("start_time", Float, nullable=False),
    Column("end_time", Float, nullable=False),
    # the signal that ended the step's worst task (sacct's ``0:N``); 0: it exited
    Column("exit_signal", Integer, nullable=False, default=0),
    # what its tasks used (migration 14; 0 and "": not measured, a step from before):
    # the most resident memory of one task, where (node, rank), the tasks' mean of their
    # most, and their CPU seconds together (sacct's MaxRSS..., AveRSS, TotalCPU)
    Column("max_rss_bytes", BigInteger, nullable=False, default=0, server_default="0"),
    Column("max_rss_node", Text, nullable=False, default="", server_default=""),
    Column("max_rss_task", Integer, nullable=False, default=0, server_default="0"),
    Column("ave_rss_bytes", BigInteger, nullable=False, default=0, server_default="0"),
    Column("total_cpu_seconds", Float, nullable=False, default=0.0, server_default="0"),
    # its tasks' GPU use (migration 16; NULL: not read for GPUs, a step given none or one
    # from before): the most of one task and the tasks' mean, of GPU memory and of SM
    # utilisation (sacct's gres/gpumem, gres/gpuutil in TRESUsageInMax/Ave)
    Column("gpu_max_mem_bytes", BigInteger, nullable=True),
    Column("gpu_ave_mem_bytes", BigInteger, nullable=True),
    Column("gpu_max_util", BigInteger, nullable=True),
    Column("gpu_ave_util", Float, nullable=True),
    # the job's CPUs and memory it was given (migration 21; 0: a step from before), as
    # scontrol show step counted them (sacct's AllocCPUS, AllocTRES of JOB.N)
    Column("cpus", Integer, nullable=False, default=0, server_default="0"),
    Column("memory_bytes", BigInteger, nullable=False, default=0, server_default="0"),
    # who scancel'd the step alone (migration 23; NULL: nobody), and whether its job's end
    # ended it (not counted in the job's DerivedExitCode)
    Column("cancelled_by", Text, nullable=True),
    Column("with_job", Boolean, nullable=False, default=False, server_default=false()),
    # total_cpu_seconds' user and system parts (migration 25; NULL: not known, a task's
    # end without them or a step from before): sacct's UserCPU, SystemCPU of JOB.N
    Column("user_cpu_seconds", Float, nullable=True),
    Column("system_cpu_seconds", Float, nullable=True),
)

# the earlier runs of requeued jobs (a requeue, a preemption, a node failure ending a
# run), written when the job goes back to the queue: sacct -D's lines before the job's
# own (migration 24). The job's row holds its latest run.
job_runs = Table(
    "job_runs",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("attempt", Integer, primary_key=True),  # the run's restart count (0: the first)
    Column("state", String(32), nullable=False),  # how it ended: REQUEUED, PREEMPTED, ...
    Column("exit_code", Integer, nullable=False),
    Column("exit_signal", Integer, nullable=False),
    Column("partition", Text, nullable=False),
    Column("submit_time", Float, nullable=False),
    Column("eligible_time", Float, nullable=True),
    Column("start_time", Float, nullable=True),
    Column("end_time", Float, nullable=False),
    Column("allocation", Text, nullable=True),  # JSON (hal.state.codec)
    Column("max_rss", BigInteger, nullable=False),
    Column("cpu_seconds", Float, nullable=False),
    # a provider's interruption notice ended it: when the server had it (migration 32)
    Column("interrupted_at", Float, nullable=True),
    # seconds of its work lost with it (sacct's LostWork; hal.state.interruptions)
    Column("lost_work", Float, nullable=True),
    # what its cloud nodes cost, in USD (migration 33; 0: none, or a run from before)
    Column("cost", Float, nullable=False, default=0.0, server_default="0"),
)
Index("ix_job_runs_end", job_runs.c.end_time)

# job steps still running (ADR 0012), so that a restarted server still knows them when
# their agents register again: written when a step starts, deleted when it is recorded
# in ``job_steps``
running_steps = Table(
    "running_steps",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    # the job's restarts when it started (a key since migration 26: each run numbers its
    # steps from 0, and an earlier run's may still be ending)
    Column("attempt", Integer, primary_key=True),
    Column("step_id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("nodes", Text, nullable=False),  # its nodes, comma-separated, in job order
    Column("tasks", Text, nullable=False),  # counts per node "2,1", or "ranks:0 2,1" (step_restore)
    Column("start_time", Float, nullable=False),
    # nodes whose part has ended: {node: [exit code, signal, oom, {rank: [most RSS,
    # CPU seconds]}, {rank: [most GPU memory, most util, mean util]}]} (JSON; the fourth
    # from HAL with step usage, migration 14, the fifth with step GPU use)
    Column("ended", Text, nullable=False, default="{}"),
    # srun runs its tasks on the batch node and reports their end (migration 13)
    Column("local", Boolean, nullable=False, default=False, server_default=false()),
    # the GPUs a step asking for its own (srun --gpus) holds on each node: {node: [ids]}
    # (JSON, migration 17)
    Column("gpu_ids", Text, nullable=False, default="{}", server_default="{}"),
    # the job's CPUs it holds on each node, by their place among the job's there:
    # {node: [places]} (JSON, migration 19)
    Column("cpus", Text, nullable=False, default="{}", server_default="{}"),
    # a local step's srun process, "PID:START" (migration 19)
    Column("srun", Text, nullable=False, default="", server_default=""),
    # the job's memory it holds on each node, in bytes: {node: bytes} (JSON, migration 20)
    Column("memory", Text, nullable=False, default="{}", server_default="{}"),
    # when scancel ended it (migration 22; null: not cancelled by scancel)
    Column("cancelled_at", Float, nullable=True),
    Column("cancelled_by", Text, nullable=True),  # who, by name (migration 23)
    # the nodes' ranks that read srun's relayed stdin: {node: [ranks]} (JSON; "": none,
    # or kept before migration 28)
    Column("relay", Text, nullable=False, default="", server_default=""),
)

# each user's scrontab file as they last saved it (docs/user/scrontab.md); its entries' jobs
# are ordinary job rows whose spec names the entry (``JobSpec.cron``)
crontabs = Table(
    "crontabs",
    metadata,
    Column("user_name", String(256), primary_key=True),
    Column("text", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# published artifacts (``hal artifact push``, docs/user/artifacts.md): one row per version, its
# content in ``artifact_blobs`` under its SHA-256 (versions with the same content share it)
artifacts = Table(
    "artifacts",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("version", String(128), primary_key=True),
    Column("sha256", String(64), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("owner", String(256), nullable=False),
    Column("created", Float, nullable=False),
    Column("kind", String(16), nullable=False),  # "archive" or "program"
)

# who a name belongs to: whoever published its first version (kept when its versions go,
# so a name cannot change hands by being emptied)
artifact_names = Table(
    "artifact_names",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("owner", String(256), nullable=False),
)

# the content, in pieces of at most ``hal.state.artifacts.PIECE`` bytes, in order;
# ``sha256`` is "upload:ID" while an upload is under way
artifact_blobs = Table(
    "artifact_blobs",
    metadata,
    Column("sha256", String(72), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("data", LargeBinary, nullable=False),
)

# artifact aliases (``hal artifact promote NAME@VERSION --to ALIAS``, hal.state.rollout):
# the version ``NAME@ALIAS`` names, the canary a share of jobs naming it gets, and the
# versions it named before (JSON list, oldest first: ``hal artifact rollback``)
artifact_aliases = Table(
    "artifact_aliases",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("alias", String(128), primary_key=True),
    Column("version", String(128), nullable=False),
    Column("canary", String(128), nullable=False),  # "" when none
    Column("share", Float, nullable=False),  # the canary's share of jobs, 0..100 (%)
    Column("since", Float, nullable=False),  # when the canary (or the version) was set
    Column("history", Text, nullable=False),
    Column("changed_by", String(256), nullable=False),
)

# what ``scontrol update PartitionName=P`` changed while the server ran, over hal.toml's
# [[partitions]] (``hal.state.partitions``): a column is NULL where hal.toml's value holds.
# Kept over a restart (as slurmctld -R keeps its partitions); ``scontrol reconfigure``
# empties the table, as Slurm's reconfigure goes back to slurm.conf.
partition_overrides = Table(
    "partition_overrides",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("state", String(16)),  # UP, DOWN, DRAIN, INACTIVE
    Column("max_time_s", BigInteger),  # 0: unlimited
    Column("default_time_s", BigInteger),  # 0: none (MaxTime)
    Column("max_nodes", Integer),  # 0: unlimited
    Column("priority_job_factor", Integer),
    Column("priority_tier", Integer),
    Column("is_default", Boolean),
    Column("updated_by", String(256), nullable=False),
    Column("updated_at", Float, nullable=False),
)

# the traffic graph between workload identities (``hal.server.traffic``), so that a
# restarted server knows who talks to whom: one row per edge, ``a`` <= ``b``, its decayed
# bytes as of ``at`` (the graph decays it further on load) and when it was first seen.
# Bounded by [harmonic] max_identities and max_peers; the running jobs' edges are not kept.
traffic_edges = Table(
    "traffic_edges",
    metadata,
    Column("a", Text, primary_key=True),
    Column("b", Text, primary_key=True),
    Column("decayed_bytes", Float, nullable=False),
    Column("at", Float, nullable=False),
    Column("since", Float, nullable=False),
)

# application feedback (``hal.server.feedback``, docs/feedback.md): one row per job and
# metric, its report count, latest value and bounded series of (time, value) points as
# JSON, oldest first (``hal.core.feedback.FeedbackSeries``); kept after the job ends, for
# sacct, and gone with the job's accounting.
job_feedback = Table(
    "job_feedback",
    metadata,
    Column("job_id", BigInteger, primary_key=True),
    Column("metric", String(64), primary_key=True),
    Column("count", BigInteger, nullable=False),
    Column("last_time", Float, nullable=False),
    Column("last_value", Float, nullable=False),
    Column("points", Text, nullable=False),
)

server_leader = Table(
    # the PostgreSQL server that leads (hal.state.leader): one row, id 1
    "server_leader",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("epoch", BigInteger, nullable=False),  # + 1 at every takeover
    Column("url", String(1024), nullable=False),  # where clients reach the leader
    Column("host", String(256), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("since", Float, nullable=False),  # the database's clock, Unix seconds
    Column("renewed", Float, nullable=False),  # the lease: the database's clock, renewed 1/s
)

server_peers = Table(
    # every PostgreSQL server on this database, leader and standbys (hal.state.peers): each
    # writes its own row at start, refreshes it every few seconds, removes it at a clean exit
    "server_peers",
    metadata,
    Column("id", String(300), primary_key=True),  # HOST:PID, as GET /v1/ha names it
    Column("url", String(1024), nullable=False),  # where clients reach it (--advertise-url)
    Column("role", String(16), nullable=False),  # leader, standby or starting
    Column("started", Float, nullable=False),  # the database's clock, Unix seconds
    Column("heartbeat", Float, nullable=False),  # the database's clock, refreshed every 3 s
)
