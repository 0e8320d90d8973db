"""Schema migrations: an ordered list of steps, each run once, recorded in ``hal_meta``.

A new release appends a step; steps never change once released. We keep this small runner
instead of Alembic because the server migrates itself at start-up on both SQLite and
PostgreSQL with no extra tool or ini file (see docs/adr/0003-state-store.md).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, insert, inspect, select, text, update

from hal.core.errors import Conflict
from hal.core.states import TERMINAL_STATES
from hal.state import schema

Step = Callable[[Connection], None]


def _v1_initial(conn: Connection) -> None:
    for table in (schema.jobs, schema.job_scripts, schema.events, schema.nodes, schema.users):
        table.create(conn, checkfirst=True)
    for ix in schema.jobs.indexes:
        ix.create(conn, checkfirst=True)
    conn.execute(insert(schema.meta).values(key="next_job_id", value=1))


def _v2_priority_fixed(conn: Connection) -> None:
    # jobs.priority_fixed: an administrator set the priority (multifactor leaves it). A
    # database created by this release already has it (v1 creates the current table).
    columns = {c["name"] for c in inspect(conn).get_columns("jobs")}
    if "priority_fixed" not in columns:
        conn.execute(
            text("ALTER TABLE jobs ADD COLUMN priority_fixed BOOLEAN NOT NULL DEFAULT FALSE")
        )


def _v3_reservations(conn: Connection) -> None:
    schema.reservations.create(conn, checkfirst=True)


def _v4_node_topology(conn: Connection) -> None:
    # nodes.topology_labels / nvlink_domain / gpu_islands: a node's topology as its agent
    # (and the config) gave it, kept over a server restart
    columns = {c["name"] for c in inspect(conn).get_columns("nodes")}
    for name, sql in (
        ("topology_labels", "TEXT NOT NULL DEFAULT '{}'"),
        ("nvlink_domain", "VARCHAR(256) NOT NULL DEFAULT ''"),
        ("gpu_islands", "TEXT NOT NULL DEFAULT '[]'"),
    ):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE nodes ADD COLUMN {name} {sql}"))


def _v5_job_marks(conn: Connection) -> None:
    # jobs.marks: job.extra's marks (preempted by, suspended at, requeue ...), so a
    # restarted server resumes a suspended victim or ends a graced one
    columns = {c["name"] for c in inspect(conn).get_columns("jobs")}
    if "marks" not in columns:
        conn.execute(text("ALTER TABLE jobs ADD COLUMN marks TEXT NOT NULL DEFAULT '{}'"))


def _v6_submit_keys(conn: Connection) -> None:
    # submit_keys: submissions sent with an Idempotency-Key, so a client may resend one
    # whose answer it lost without submitting its jobs twice
    schema.submit_keys.create(conn, checkfirst=True)  # with its index


def _v7_events_time(conn: Connection) -> None:
    # events.time: [accounting] purge_events_after finds the old events by it, a batch at a
    # time, without reading the whole table (a database created by v1 now has it already)
    for ix in schema.events.indexes:
        ix.create(conn, checkfirst=True)


def _v8_agent_tokens(conn: Connection) -> None:
    # users.agent / agent_nodes: tokens for node agents, accepted by /v1/agent only
    # (docs/admin/security.md); the users of an older database stay what they were
    columns = {c["name"] for c in inspect(conn).get_columns("users")}
    for name, sql in (
        ("agent", "BOOLEAN NOT NULL DEFAULT FALSE"),
        ("agent_nodes", "TEXT NOT NULL DEFAULT ''"),
    ):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE users ADD COLUMN {name} {sql}"))


def _v9_job_steps(conn: Connection) -> None:
    # job_steps: the job steps srun ran (ADR 0012), for sacct's JOB.N rows
    schema.job_steps.create(conn, checkfirst=True)


def _v10_step_signals(conn: Connection) -> None:
    # job_steps.exit_signal: a step ended by a signal shows 0:N in sacct, as Slurm's; the
    # steps recorded before keep 128+N as their exit code
    columns = {c["name"] for c in inspect(conn).get_columns("job_steps")}
    if "exit_signal" not in columns:
        conn.execute(
            text("ALTER TABLE job_steps ADD COLUMN exit_signal INTEGER NOT NULL DEFAULT 0")
        )


def _v11_running_steps(conn: Connection) -> None:
    # running_steps: steps that run while the server restarts go on (ADR 0012); their
    # agents, registering again, keep them
    schema.running_steps.create(conn, checkfirst=True)


def _v12_crontabs(conn: Connection) -> None:
    # crontabs: each user's scrontab file (docs/user/scrontab.md)
    schema.crontabs.create(conn, checkfirst=True)


def _v13_local_running_steps(conn: Connection) -> None:
    # running_steps.local: the steps srun runs on the batch node are kept for a restart
    # too, so the next srun does not reuse a running one's id and srun's end report finds
    # it (ADR 0012)
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "local" not in columns:
        conn.execute(
            text("ALTER TABLE running_steps ADD COLUMN local BOOLEAN NOT NULL DEFAULT FALSE")
        )


def _v14_step_usage(conn: Connection) -> None:
    # job_steps.max_rss_bytes ... total_cpu_seconds: what an ended step's tasks used
    # (sacct's MaxRSS, AveRSS, MaxRSSNode, MaxRSSTask, TotalCPU of JOB.N); the steps
    # recorded before read as not measured
    columns = {c["name"] for c in inspect(conn).get_columns("job_steps")}
    for name, sql in (
        ("max_rss_bytes", "BIGINT NOT NULL DEFAULT 0"),
        ("max_rss_node", "TEXT NOT NULL DEFAULT ''"),
        ("max_rss_task", "INTEGER NOT NULL DEFAULT 0"),
        ("ave_rss_bytes", "BIGINT NOT NULL DEFAULT 0"),
        ("total_cpu_seconds", "FLOAT NOT NULL DEFAULT 0"),
    ):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE job_steps ADD COLUMN {name} {sql}"))


def _v15_node_reasons(conn: Connection) -> None:
    # nodes.reason_user / reason_time: who set a node's reason and when (sinfo -R,
    # scontrol show node's "Reason=... [user@time]"); older reasons keep no one, no time
    columns = {c["name"] for c in inspect(conn).get_columns("nodes")}
    for name, sql in (
        ("reason_user", "VARCHAR(256) NOT NULL DEFAULT ''"),
        ("reason_time", "DOUBLE PRECISION"),
    ):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE nodes ADD COLUMN {name} {sql}"))


def _v16_step_gpu_usage(conn: Connection) -> None:
    # job_steps.gpu_*: what an ended step's tasks did with their GPUs (sacct's
    # gres/gpumem and gres/gpuutil of JOB.N); NULL, as for the steps recorded before:
    # not read for GPUs
    columns = {c["name"] for c in inspect(conn).get_columns("job_steps")}
    for name, sql in (
        ("gpu_max_mem_bytes", "BIGINT"),
        ("gpu_ave_mem_bytes", "BIGINT"),
        ("gpu_max_util", "BIGINT"),
        ("gpu_ave_util", "FLOAT"),
    ):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE job_steps ADD COLUMN {name} {sql}"))


def _v17_step_gpu_ids(conn: Connection) -> None:
    # running_steps.gpu_ids: the GPUs a step that asked for its own holds, so a restarted
    # server gives them to no other step; the steps kept before hold none
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "gpu_ids" not in columns:
        conn.execute(
            text("ALTER TABLE running_steps ADD COLUMN gpu_ids TEXT NOT NULL DEFAULT '{}'")
        )


def _v18_eligible_of_ended_pending(conn: Connection) -> None:
    # sacct lists a job in a time window from its EligibleTime, as Slurm's accounting; a
    # job that ended while pending now keeps it (Cluster._eligible_kept), one ended before
    # kept none, so it would drop out of every window: it is taken as eligible from its
    # submission (a held one, which was not, is listed as before)
    ended = ", ".join(sorted(f"'{s.value}'" for s in TERMINAL_STATES))
    conn.execute(
        text(
            "UPDATE jobs SET eligible_time = submit_time WHERE eligible_time IS NULL "
            f"AND start_time IS NULL AND state IN ({ended})"
        )
    )


def _v19_step_cpus(conn: Connection) -> None:
    # running_steps.cpus: the job's CPUs a step holds on each node (srun without
    # --overlap), so a restarted server makes the next step wait for them; the steps kept
    # before hold none. running_steps.srun: a local step's srun process, so another srun
    # can tell that it is gone
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "cpus" not in columns:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN cpus TEXT NOT NULL DEFAULT '{}'"))
    if "srun" not in columns:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN srun TEXT NOT NULL DEFAULT ''"))


def _v20_step_memory(conn: Connection) -> None:
    # running_steps.memory: the job's memory a step holds on each node, so a restarted
    # server makes the next step wait for it; the steps kept before hold none
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "memory" not in columns:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN memory TEXT NOT NULL DEFAULT '{}'"))


def _v21_step_allocation(conn: Connection) -> None:
    # job_steps.cpus, job_steps.memory_bytes: what an ended step was given, for sacct's
    # AllocCPUS and AllocTRES of JOB.N; the steps recorded before show the job's
    columns = {c["name"] for c in inspect(conn).get_columns("job_steps")}
    if "cpus" not in columns:
        conn.execute(text("ALTER TABLE job_steps ADD COLUMN cpus INTEGER NOT NULL DEFAULT 0"))
    if "memory_bytes" not in columns:
        conn.execute(
            text("ALTER TABLE job_steps ADD COLUMN memory_bytes BIGINT NOT NULL DEFAULT 0")
        )


def _v22_step_cancel(conn: Connection) -> None:
    # running_steps.cancelled_at: when scancel ended a running step, so a restarted
    # server still ends it (its agent may not have had the kill) and srun still says so
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "cancelled_at" not in columns:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN cancelled_at DOUBLE PRECISION"))


def _v23_step_endings(conn: Connection) -> None:
    # job_steps.cancelled_by: who scancel'd the step alone (sacct's "CANCELLED by UID");
    # job_steps.with_job: its job's end ended it (its exit does not count in the job's
    # DerivedExitCode); running_steps.cancelled_by, kept for a restart
    columns = {c["name"] for c in inspect(conn).get_columns("job_steps")}
    if "cancelled_by" not in columns:
        conn.execute(text("ALTER TABLE job_steps ADD COLUMN cancelled_by TEXT"))
    if "with_job" not in columns:
        conn.execute(
            text("ALTER TABLE job_steps ADD COLUMN with_job BOOLEAN NOT NULL DEFAULT FALSE")
        )
    if "cancelled_by" not in {c["name"] for c in inspect(conn).get_columns("running_steps")}:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN cancelled_by TEXT"))


def _v24_job_runs(conn: Connection) -> None:
    # job_runs: a requeued job's earlier runs, for sacct -D; jobs requeued before have none
    schema.job_runs.create(conn, checkfirst=True)


def _v25_cpu_parts(conn: Connection) -> None:
    # jobs.user_cpu_seconds / system_cpu_seconds, and job_steps' the same: the user and
    # system parts of the CPU time the batch script, and a step's tasks, used (sacct's
    # UserCPU and SystemCPU); NULL, as for what was recorded before: not known
    for table in ("jobs", "job_steps"):
        columns = {c["name"] for c in inspect(conn).get_columns(table)}
        for name in ("user_cpu_seconds", "system_cpu_seconds"):
            if name not in columns:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} FLOAT"))


# the run a step recorded before migration 26 started in: the job's latest run less the
# earlier runs (``job_runs``) that ended after it started, as sacct -D placed it by its
# start (a job requeued before ``job_runs`` existed has no earlier runs: its latest)
_RUN_OF_STEP = (
    "COALESCE((SELECT restarts FROM jobs WHERE jobs.id = job_steps.job_id), 0) - "
    "(SELECT COUNT(*) FROM job_runs WHERE job_runs.job_id = job_steps.job_id "
    "AND job_runs.end_time > job_steps.start_time)"
)
_STEP_KEY = ["job_id", "attempt", "step_id"]


def _v26_step_runs(conn: Connection) -> None:
    # job_steps.attempt, and the run in both step tables' keys: each run of a requeued
    # job numbers its steps from 0, as Slurm's (an earlier run's may still be ending)
    if "attempt" not in {c["name"] for c in inspect(conn).get_columns("job_steps")}:
        conn.execute(text("ALTER TABLE job_steps ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0"))
        run = _RUN_OF_STEP
        conn.execute(
            text(f"UPDATE job_steps SET attempt = CASE WHEN {run} > 0 THEN {run} ELSE 0 END")
        )
    for table in (schema.job_steps, schema.running_steps):
        key = inspect(conn).get_pk_constraint(table.name)
        if key["constrained_columns"] == _STEP_KEY:
            continue  # (made by this release: its first step created it so)
        if conn.dialect.name == "postgresql":
            conn.execute(text(f'ALTER TABLE {table.name} DROP CONSTRAINT "{key["name"]}"'))
            conn.execute(
                text(f"ALTER TABLE {table.name} ADD PRIMARY KEY (job_id, attempt, step_id)")
            )
        else:  # SQLite changes no key in place: the table is made again
            names = ", ".join(f'"{c.name}"' for c in table.columns)
            conn.execute(text(f"ALTER TABLE {table.name} RENAME TO {table.name}_v25"))
            table.create(conn)
            conn.execute(
                text(f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {table.name}_v25")
            )
            conn.execute(text(f"DROP TABLE {table.name}_v25"))


def _v27_artifacts(conn: Connection) -> None:
    # artifacts, artifact_names, artifact_blobs: the artifact registry (docs/user/artifacts.md)
    for table in (schema.artifacts, schema.artifact_names, schema.artifact_blobs):
        table.create(conn, checkfirst=True)


def _v34_artifact_aliases(conn: Connection) -> None:
    # artifact_aliases: NAME@stable and its canary (hal.state.rollout)
    schema.artifact_aliases.create(conn, checkfirst=True)


def _v35_server_leader(conn: Connection) -> None:
    # server_leader: which PostgreSQL server leads, its epoch and lease (hal.state.leader)
    schema.server_leader.create(conn, checkfirst=True)


def _v36_server_peers(conn: Connection) -> None:
    # server_peers: every server on the database and its address, refreshed by heartbeats,
    # so clients given one address learn the others (hal.state.peers)
    schema.server_peers.create(conn, checkfirst=True)


def _v28_step_input_readers(conn: Connection) -> None:
    # running_steps.relay: the ranks that read srun's relayed stdin, so a restarted server
    # takes the relay up and srun sends again what it lost; steps kept before: none known
    columns = {c["name"] for c in inspect(conn).get_columns("running_steps")}
    if "relay" not in columns:
        conn.execute(text("ALTER TABLE running_steps ADD COLUMN relay TEXT NOT NULL DEFAULT ''"))


def _v29_partition_overrides(conn: Connection) -> None:
    # partition_overrides: partitions changed by scontrol update, kept over a restart
    schema.partition_overrides.create(conn, checkfirst=True)


def _v30_traffic_edges(conn: Connection) -> None:
    # traffic_edges: the traffic graph between workload identities, kept over a restart
    schema.traffic_edges.create(conn, checkfirst=True)


def _v31_job_feedback(conn: Connection) -> None:
    # job_feedback: the series a job reports about itself (hal feedback), kept for sacct
    schema.job_feedback.create(conn, checkfirst=True)


def _v32_run_interruptions(conn: Connection) -> None:
    # job_runs.interrupted_at and lost_work: which runs a provider's interruption notice
    # ended, and the work each lost (sacct's Interrupted, LostWork); runs kept before: none
    columns = {c["name"] for c in inspect(conn).get_columns("job_runs")}
    for name in ("interrupted_at", "lost_work"):
        if name not in columns:
            conn.execute(text(f"ALTER TABLE job_runs ADD COLUMN {name} FLOAT"))


def _v33_run_costs(conn: Connection) -> None:
    # job_runs.cost: what each requeued run's cloud nodes cost (hal cloud costs, budgets)
    columns = {c["name"] for c in inspect(conn).get_columns("job_runs")}
    if "cost" not in columns:
        conn.execute(text("ALTER TABLE job_runs ADD COLUMN cost FLOAT NOT NULL DEFAULT 0"))
    conn.execute(text("CREATE INDEX IF NOT EXISTS ix_job_runs_end ON job_runs (end_time)"))


STEPS: tuple[Step, ...] = (
    _v1_initial,
    _v2_priority_fixed,
    _v3_reservations,
    _v4_node_topology,
    _v5_job_marks,
    _v6_submit_keys,
    _v7_events_time,
    _v8_agent_tokens,
    _v9_job_steps,
    _v10_step_signals,
    _v11_running_steps,
    _v12_crontabs,
    _v13_local_running_steps,
    _v14_step_usage,
    _v15_node_reasons,
    _v16_step_gpu_usage,
    _v17_step_gpu_ids,
    _v18_eligible_of_ended_pending,
    _v19_step_cpus,
    _v20_step_memory,
    _v21_step_allocation,
    _v22_step_cancel,
    _v23_step_endings,
    _v24_job_runs,
    _v25_cpu_parts,
    _v26_step_runs,
    _v27_artifacts,
    _v28_step_input_readers,
    _v29_partition_overrides,
    _v30_traffic_edges,
    _v31_job_feedback,
    _v32_run_interruptions,
    _v33_run_costs,
    _v34_artifact_aliases,
    _v35_server_leader,
    _v36_server_peers,
)


def migrate(conn: Connection) -> int:
    """Bring the schema up to date inside ``conn``'s transaction; return the version."""
    schema.meta.create(conn, checkfirst=True)
    row = conn.execute(
        select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
    ).first()
    version = int(row[0]) if row else 0
    if version > len(STEPS):
        raise Conflict(  # an operator's situation, not a bug: one line, not a traceback
            f"the database schema is version {version}, newer than this HAL's {len(STEPS)} "
            "(a newer HAL wrote it): run that HAL, or upgrade this one"
        )
    for step in STEPS[version:]:
        step(conn)
    if row is None:
        conn.execute(insert(schema.meta).values(key="schema_version", value=len(STEPS)))
    else:
        conn.execute(
            update(schema.meta)
            .where(schema.meta.c.key == "schema_version")
            .values(value=len(STEPS))
        )
    return len(STEPS)
