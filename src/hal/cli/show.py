"""``hal show JOB``: one job for people, laid out as ``scontrol show job`` lays it out
(grouped lines of ``Key=Value``), with times as dates, durations as ``[D-]HH:MM:SS`` and
sizes with units, and what does not apply to the job (None, empty, zero where zero
means "not asked") left out, so that what is left is about this job. HAL's own fields
(the planned run time, where its inputs and artifacts are) join the lines they belong to.
``hal show JOB --json`` prints the REST object unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from hal.cli.harmonic import rate
from hal.cli.host_share import size_text
from hal.compat.formats import cpu_time, limit_long, timestamp
from hal.compat.job_fields import batch_command, time_used, total_cpu_seconds
from hal.slurm.syntax import compress_hostlist, duration_long
from hal.wire.feedback import JobFeedback
from hal.wire.jobs import JobInfo

Pair = tuple[str, object]  # a key and its value; None, "", [] and False are left out
INDENT = "   "


def job_lines(job: JobInfo, now: float) -> list[str]:
    """``job`` as ``hal show`` prints it, one list item per line."""
    groups: list[Sequence[Pair]] = [
        [
            ("JobId", job.display_id),
            ("JobName", job.name),
            ("ArrayJobId", job.array_job_id),
            ("ArrayTaskId", job.array_task_id),
            ("ArrayTaskThrottle", job.array_max_running or None),
            ("HetJobId", job.het_job_id),
            ("HetJobOffset", job.het_job_offset),
            ("HetJobIdSet", job.het_job_id_set),
        ],
        [
            ("User", job.user),
            ("Account", job.account),
            ("QOS", job.qos),
            ("Partition", job.partition),
            ("Reservation", job.reservation),
            ("WCKey", job.wckey),
        ],
        [
            ("JobState", job.state),
            ("Reason", None if job.reason == "None" else job.reason),
            ("Dependency", job.dependency_state or job.dependency),
            ("Held", "yes" if job.held else None),
            ("CancelledBy", job.cancelled_by),
        ],
        [
            ("Priority", job.priority),
            ("Nice", job.nice or None),
            ("Requeue", None if job.requeue else "no"),  # (Slurm's default: yes)
            ("Restarts", job.restarts or None),
            ("RequeuedAfter", job.requeued_after),
            ("ExitCode", f"{job.exit_code}:{job.exit_signal}" if job.end_time else None),
        ],
        [
            ("RunTime", duration_long(time_used(job, now)) if job.start_time else None),
            ("TimeLimit", limit_long(job.time_limit_seconds)),
            ("TimeMin", _duration(job.time_min_seconds)),
            ("Suspended", _duration(job.suspended_seconds)),
        ],
        [
            ("SubmitTime", _when(job.submit_time)),
            ("EligibleTime", _when(job.eligible_time)),
            ("StartTime", _when(job.start_time)),
            ("EndTime", _when(job.end_time)),
            ("Deadline", _when(job.deadline)),
            ("PreemptTime", _when(job.preempt_time)),
        ],
        _plan(job),
        [
            ("NodeList", compress_hostlist(job.nodes) if job.nodes else None),
            ("ReqNodeList", compress_hostlist(job.req_nodes) if job.req_nodes else None),
            ("ExcNodeList", compress_hostlist(job.exc_nodes) if job.exc_nodes else None),
            ("Features", "&".join(job.constraint)),
        ],
        [
            ("NumNodes", job.node_count),
            ("NumCPUs", job.cpus),
            ("NumTasks", job.ntasks),
            ("CPUs/Task", job.cpus_per_task),
            ("MinCPUsNode", job.min_cpus_per_node or None),
            ("Memory", _memory(job)),
            ("GPUs", job.gpus or None),
            ("Licenses", job.licenses),
            ("Exclusive", "yes" if job.exclusive else "user" if job.exclusive_user else None),
        ],
        _usage(job),
        _profile(job),
        [("Near", ",".join(job.near)), ("Apart", ",".join(job.apart))],
        [("FeedbackGoal", job.feedback_goal), ("FeedbackMetrics", job.feedback_metrics)],
        [("Data", ",".join(job.data)), ("Artifacts", ",".join(job.artifacts))],
        [("ArtifactAliases", ",".join(job.artifact_aliases))],
        [("ArtifactDigests", ",".join(job.artifact_digests))],
        [("Topology", job.topology), ("Switches", job.switches or None)],
        [("BurstAfter", job.burst_after)],  # ([cloud]: its patience before new nodes)
        [("Placement", job.placement)],  # (a sentence: the traffic graph's note)
        # (no Command for --wrap or a script from stdin)
        [("Command", batch_command(job) if job.script_path else None), ("WorkDir", job.workdir)],
        [("StdOut", job.stdout), ("StdErr", None if job.stderr == job.stdout else job.stderr)],
        [("Comment", job.comment), ("SubmitHost", job.submit_host)],
        _mail(job),
        [("CronJob", job.cron)],
    ]
    lines = [" ".join(f"{k}={v}" for k, v in group if _shown(v)) for group in groups]
    lines = [line for line in lines if line]
    return [lines[0], *(INDENT + line for line in lines[1:])]


def _shown(value: object) -> bool:
    return value is not None and value not in ("", [])


def _when(t: float | None) -> str | None:
    return timestamp(t) if t else None


def _duration(seconds: float | None) -> str | None:
    return duration_long(seconds) if seconds else None


def _memory(job: JobInfo) -> str | None:
    if job.memory_whole_node:
        return "all of each node"
    if not job.memory_bytes:
        return None
    per_node = job.memory_bytes // max(job.node_count, 1)
    each = f" ({size_text(per_node)} a node)" if job.node_count > 1 else ""
    return size_text(job.memory_bytes) + each


def _plan(job: JobInfo) -> list[Pair]:
    """The scheduler's plan: a pending job's expected start, and the run time and end it
    plans with (the predictor's, capped at the time limit; never a limit itself)."""
    return [
        ("ExpectedStart", _when(job.expected_start) if job.start_time is None else None),
        ("PredictedRunTime", _duration(job.predicted_runtime_seconds)),
        ("PredictedEnd", _when(job.predicted_end) if job.end_time is None else None),
    ]


def _usage(job: JobInfo) -> list[Pair]:
    """What the batch script used: at its end, or so far (its agent's latest sample)."""
    if not job.start_time:
        return []
    cpu = total_cpu_seconds(job)
    pairs: list[Pair] = [
        ("MaxRSS", size_text(job.max_rss_bytes) if job.max_rss_bytes else None),
        ("CPUTime", cpu_time(cpu)),
    ]
    g = job.gpu_usage
    if g is not None:
        pairs += [("GPUMemMax", size_text(g.max_mem_bytes)), ("GPUUtilMax", f"{g.max_util}%")]
    return pairs


def _profile(job: JobInfo) -> list[Pair]:
    """How the job behaves on its batch node (its agent's latest profile, while it runs)
    and the class that puts it in; whether it asked to be kept from noisy neighbours."""
    pairs: list[Pair] = [
        ("Profile", job.profile_class),
        ("LatencySensitive", "yes" if job.latency_sensitive else None),
        ("Malleable", job.malleable),
        ("FeedbackAction", job.feedback_action),
    ]
    p = job.profile
    if p is None:
        return pairs
    stalls = [
        f"{name}:{share * 100:.0f}%"
        for name, share in (
            ("cpu", p.cpu_pressure),
            ("memory", p.memory_pressure),
            ("io", p.io_pressure),
        )
        if share is not None
    ]
    return [
        *pairs,
        ("CPUBusy", f"{p.cpu_util:.2f}"),
        ("RSS", size_text(p.rss_bytes)),
        ("Read", rate(p.read_bytes_per_s)),
        ("Write", rate(p.write_bytes_per_s)),
        ("Net", rate(p.net_bytes_per_s) if p.net_bytes_per_s is not None else None),
        ("Pressure", ",".join(stalls)),
    ]


def _mail(job: JobInfo) -> list[Pair]:
    if job.mail_type == "NONE":
        return []
    return [("MailType", job.mail_type), ("MailUser", job.mail_user)]


def feedback_line(feedback: JobFeedback) -> list[str]:
    """What the job reported about itself (hal feedback), one line: each metric's
    latest value, the way it is better (as declared with --feedback-goal) and how many
    reports; none for a job that reported nothing."""
    if not feedback.metrics:
        return []
    parts = []
    for m in feedback.metrics:
        reports = f"{m.count} report{'s' if m.count != 1 else ''}"
        parts.append(f"{m.name}={m.latest:g} ({m.goal + ', ' if m.goal else ''}{reports})")
    return [INDENT + "Feedback: " + "  ".join(parts)]
