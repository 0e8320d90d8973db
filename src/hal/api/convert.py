"""The REST edge: ``wire`` models ↔ core types, in one place."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from hal.api.dependency_view import dependency_shown
from hal.api.errors import field_path
from hal.core.artifacts import ArtifactRef, parse_requests
from hal.core.cloud_costs import RATE, rate_of, run_cost
from hal.core.container import Container, parse_container
from hal.core.data import expand_datasets, parse_data_keys
from hal.core.errors import InvalidRequest
from hal.core.feedback import format_goals, parse_goals, parse_scrape
from hal.core.job import (
    WAITING_ON_OTHERS,
    ArraySpec,
    Dependency,
    Job,
    JobSpec,
    SignalSpec,
    TopologyConstraint,
)
from hal.core.job_rules import JobRule, check_consistent, parse_rules
from hal.core.malleable import ACTION, declared_range
from hal.core.node import Node, Partition
from hal.core.partition_list import shown_partition
from hal.core.patience import parse_patience
from hal.core.preemption import PreemptionPolicy
from hal.core.profiles import LATENCY_SENSITIVE, PROFILE_CLASS
from hal.core.pyenv import PythonEnv, make_python_env
from hal.core.states import JobState, PartitionState
from hal.core.suspension import SUSPENDED_AT, suspended_seconds
from hal.slurm.filenames import FilenameFields, output_paths
from hal.slurm.mail import check_mail_user, mail_recipient, mail_type_names, parse_mail_type
from hal.slurm.syntax import (
    format_licenses,
    format_umask,
    parse_array,
    parse_dependency,
    parse_licenses,
    parse_signal,
    parse_switches,
    parse_topology,
    parse_umask,
)
from hal.state import agents, interruptions, preempt
from hal.state.cluster import Cluster
from hal.state.codec import SYSTEM_CPU, USER_CPU
from hal.state.job_changes import PLACEMENT_NOTE
from hal.state.node_flags import last_contact, node_state_flags, power_display
from hal.state.rollout import pins_of
from hal.wire.bounds import INT64_MAX
from hal.wire.jobs import JobInfo, JobSubmit
from hal.wire.nodes import BlockInfo, NodeInfo, PartitionInfo, SwitchInfo, TopologyInfo

if TYPE_CHECKING:
    from hal.api.cloud_nodes import CloudNodes

MAX_ENV_BYTES = 1024 * 1024
MAX_SCRIPT_ARGS_BYTES = 128 * 1024


def nul_field(value: object, where: tuple[object, ...] = ()) -> str | None:
    """Where ``value`` (a request's fields, as JSON gives them) holds a NUL character, e.g.
    ``environment.A`` or ``exclude[1]``; None when nowhere. PostgreSQL's text columns
    cannot store one."""
    if isinstance(value, str):
        return (field_path(where) or "value") if "\x00" in value else None
    if isinstance(value, dict):
        items: Iterable[tuple[object, object]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return field_path((*where, repr(key)))
        found = nul_field(item, (*where, key))
        if found is not None:
            return found
    return None


def to_spec(
    req: JobSubmit,
    user: str,
    *,
    max_array_size: int,
    where: str = "",
    datasets: Mapping[str, tuple[str, ...]] | None = None,
    mail_domain: str = "",
    element: Callable[[int, int], int] | None = None,
) -> JobSpec:
    """Validate one submission and resolve it into a ``JobSpec`` (``mail_domain``: the
    cluster's ``[mail] domain``, for the default ``--mail-user``; ``element``: an array
    element's job id, for dependencies on ``123_4``).

    The stages run in this order, so that a request with several faults is told the
    first of them, always the same one: its text (script, environment, arguments), its
    resources, then the options parsed from Slurm's syntax (when, where, feedback goals,
    I/O, accounting and mail, each error prefixed with ``where``), then the job ids its
    dependencies name."""

    def bad(message: str, field: str) -> InvalidRequest:
        return InvalidRequest(f"{where}{field}: {message}", field=where + field)

    _check_text(req, bad)
    resources = _resources(req, where, bad)
    try:
        timing = _timing(req, max_array_size, element)
        placement = _placement(req)
        feedback_goals = parse_goals(req.feedback_goal)  # (hal.core.feedback)
        scrape = str(parse_scrape(req.feedback_metrics)) if req.feedback_metrics else ""
        inputs = _inputs(req, datasets or {})
        accounting = _accounting(req, user, mail_domain)
        malleable = declared_range(
            req.malleable,
            resources["nodes_min"],
            resources["nodes_max"],
            resources["cpus_per_task"],
            req.cpus_per_task_max,
        )
    except InvalidRequest as err:
        raise InvalidRequest(f"{where}{err.message}", field=where + (err.field or "")) from err
    _check_dependency_ids(timing["dependency"], bad)
    return JobSpec(
        user=user,
        **inputs,
        **resources,
        **timing,
        **placement,
        **accounting,
        feedback_goals=feedback_goals,
        feedback_metrics=scrape,
        latency_sensitive=req.latency_sensitive,
        malleable=malleable,
    )


class _Resources(TypedDict):
    nodes_min: int
    nodes_max: int
    fewest_nodes: bool
    ntasks: int
    ntasks_per_node: int | None
    cpus_per_task: int
    min_cpus_per_node: int
    memory_per_node_bytes: int | None
    memory_per_cpu_bytes: int | None
    memory_per_gpu_bytes: int | None
    gpus_per_node: int
    gpus_total: int
    gpus_per_task: int
    gpu_type: str | None


class _Timing(TypedDict):
    time_limit_s: int | None
    time_min_s: int | None
    array: ArraySpec | None
    dependency: Dependency | None
    kill_on_invalid_dep: bool
    hold: bool
    begin_time: float | None
    deadline: float | None
    burst_after: str
    requeue: bool
    signal: SignalSpec | None
    priority: int | None
    nice: int


class _Placement(TypedDict):
    partitions: tuple[str, ...]
    constraint: tuple[str, ...]
    exclude: tuple[str, ...]
    nodelist: tuple[str, ...]
    reservation: str
    exclusive: bool
    exclusive_user: bool
    switches: int
    switch_wait_s: int | None
    topology: TopologyConstraint | None
    near: tuple[JobRule, ...]
    apart: tuple[JobRule, ...]


class _Inputs(TypedDict):
    script: str
    name: str
    script_args: tuple[str, ...]
    script_path: str | None
    workdir: str
    environment: tuple[tuple[str, str], ...]
    stdout: str | None
    stderr: str | None
    open_mode: str
    data: tuple[str, ...]
    artifacts: tuple[ArtifactRef, ...]
    python_env: PythonEnv | None
    container: Container | None


class _Accounting(TypedDict):
    account: str | None
    qos: str | None
    wckey: str
    comment: str
    submit_host: str
    interactive: bool
    licenses: tuple[tuple[str, int], ...]
    mail_type: int
    mail_user: str


def _check_text(req: JobSubmit, bad: Callable[[str, str], InvalidRequest]) -> None:
    """Whether the script, environment, arguments and workdir are text a node can run:
    not empty, no NUL anywhere, variable names execve keeps, within the size limits."""
    if not req.script.strip():
        raise bad("the batch script is empty", "script")
    nul = nul_field({f.name: getattr(req, f.name) for f in dataclasses.fields(req)})
    if nul is not None:
        raise bad("holds a NUL character (\\u0000), which no job field may hold; remove it", nul)
    odd = next((k for k in req.environment if not k or "=" in k), None)
    if odd is not None:  # execve would split or drop it: the job would fail on the node
        raise bad(f"a variable name cannot be empty or hold '=': {odd!r}", "environment")
    if sum(len(k) + len(v) for k, v in req.environment.items()) > MAX_ENV_BYTES:
        raise bad("the environment is larger than 1 MiB", "environment")
    _check_script_args(req.script_args, bad)
    if not req.workdir.startswith("/"):
        raise bad("workdir must be an absolute path", "workdir")


def _resources(req: JobSubmit, where: str, bad: Callable[[str, str], InvalidRequest]) -> _Resources:
    """How much the job asks for: its memory (one of --mem, --mem-per-cpu,
    --mem-per-gpu), nodes, tasks, CPUs and GPUs."""
    mems = [
        m
        for m in (req.memory_per_node_bytes, req.memory_per_cpu_bytes, req.memory_per_gpu_bytes)
        if m is not None
    ]
    if len(mems) > 1:
        raise bad("--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive", "memory")
    # 0 of any of them is all of each node's memory (Slurm 22.05.8's --mem=0,
    # --mem-per-cpu=0, --mem-per-gpu=0), kept one way: memory_per_node_bytes=0
    whole_memory = mems == [0]
    nodes_min, nodes_max, fewest_nodes = _node_counts(req, where, bad)
    return _Resources(
        nodes_min=nodes_min,
        nodes_max=nodes_max,
        fewest_nodes=fewest_nodes,
        ntasks=req.ntasks or (req.ntasks_per_node * nodes_min if req.ntasks_per_node else 1),
        ntasks_per_node=req.ntasks_per_node,
        cpus_per_task=req.cpus_per_task,
        min_cpus_per_node=req.min_cpus_per_node,
        memory_per_node_bytes=0 if whole_memory else req.memory_per_node_bytes,
        memory_per_cpu_bytes=None if whole_memory else req.memory_per_cpu_bytes,
        memory_per_gpu_bytes=None if whole_memory else req.memory_per_gpu_bytes,
        gpus_per_node=req.gpus_per_node,
        gpus_total=req.gpus,
        gpus_per_task=req.gpus_per_task,
        gpu_type=req.gpu_type,
    )


def _node_counts(
    req: JobSubmit, where: str, bad: Callable[[str, str], InvalidRequest]
) -> tuple[int, int, bool]:
    """The job's fewest and most nodes, widened to fit its tasks, and whether it takes as
    few as its tasks fit on (no -N given)."""
    nodes_min, nodes_max = req.nodes_min, req.nodes_max or req.nodes_min
    if nodes_max < nodes_min:
        raise bad(f"nodes max {nodes_max} is below min {nodes_min}", "nodes")
    if req.ntasks and req.ntasks_per_node:
        # sbatch.1: with --ntasks, --ntasks-per-node is the most tasks one node runs, so
        # the tasks need this many nodes; an explicit -N (nodes_max sent) must allow them
        needed = -(-req.ntasks // req.ntasks_per_node)
        if req.nodes_max is not None and req.nodes_max < needed:
            raise InvalidRequest(
                f"{where}Requested node configuration is not available: {req.ntasks} tasks, "
                f"at most {req.ntasks_per_node} per node, need {needed} nodes; --nodes "
                f"allows {req.nodes_max}",
                field=where + "nodes",
            )
        nodes_min, nodes_max = max(nodes_min, needed), max(nodes_max, needed)
    # sbatch.1: without -N, "enough nodes to satisfy the request" (-n 3 on two-CPU nodes:
    # two); at most one per task
    fewest_nodes = (
        req.nodes_max is None
        and not req.ntasks_per_node
        and nodes_min == nodes_max == 1
        and (req.ntasks or 1) > 1
    )
    if fewest_nodes:
        nodes_max = req.ntasks or 1
    return nodes_min, nodes_max, fewest_nodes


def _timing(
    req: JobSubmit, max_array_size: int, element: Callable[[int, int], int] | None
) -> _Timing:
    """When the job may start and end: its limits, array, dependencies, hold, begin
    time, deadline, requeue, warning signal and priority."""
    return _Timing(
        time_limit_s=req.time_limit_seconds,
        time_min_s=req.time_min_seconds or None,
        array=parse_array(req.array, max_array_size) if req.array else None,
        dependency=parse_dependency(req.dependency, element=element) if req.dependency else None,
        kill_on_invalid_dep=req.kill_on_invalid_dep,
        hold=req.hold,
        begin_time=req.begin_time,
        deadline=req.deadline,
        burst_after=str(parse_patience(req.burst_after)) if req.burst_after else "",
        requeue=req.requeue,
        signal=parse_signal(req.signal) if req.signal else None,
        priority=req.priority,
        nice=req.nice,
    )


def _placement(req: JobSubmit) -> _Placement:
    """Where the job may run: partitions, features, node lists, reservation,
    exclusivity, switches and topology, and its near/apart rules towards other jobs."""
    switches, switch_wait = parse_switches(req.switches) if req.switches else (0, None)
    topology = parse_topology(req.topology) if req.topology else None
    near = parse_rules(req.near, "near")
    apart = parse_rules(req.apart, "apart")
    check_consistent(near, apart)
    # (a name listed twice counts once)
    partitions = tuple(dict.fromkeys(p.strip() for p in (req.partition or "").split(",")))
    return _Placement(
        partitions=tuple(p for p in partitions if p),
        constraint=tuple(req.constraint),
        exclude=tuple(req.exclude),
        nodelist=tuple(req.nodelist),
        reservation=req.reservation.strip(),
        exclusive=req.exclusive,
        exclusive_user=req.exclusive_user and not req.exclusive,
        switches=switches,
        switch_wait_s=switch_wait,
        topology=topology,
        near=near,
        apart=apart,
    )


def _inputs(req: JobSubmit, datasets: Mapping[str, tuple[str, ...]]) -> _Inputs:
    """What the job runs and with what: its script, arguments, workdir, environment
    (with SLURM_UMASK from --umask), output files, data sets and artifacts."""
    data = parse_data_keys(req.data) if req.data else ()
    data = expand_datasets(data, datasets)
    artifacts = tuple(ArtifactRef(n, v, "") for n, v in parse_requests(req.artifacts))
    umask = parse_umask(req.umask) if req.umask is not None else None
    environment = req.environment
    if umask is not None:  # the job's node applies SLURM_UMASK, as slurmstepd does
        environment = {**environment, "SLURM_UMASK": format_umask(umask)}
    return _Inputs(
        script=req.script,
        name=req.name or "sbatch",
        script_args=tuple(req.script_args),
        script_path=req.script_path,
        workdir=req.workdir,
        environment=tuple(sorted(environment.items())),
        stdout=req.stdout,
        stderr=req.stderr,
        open_mode=req.open_mode or "",
        data=data,
        artifacts=artifacts,
        python_env=make_python_env(req.python_env) if req.python_env else None,
        container=parse_container(req.container) if req.container is not None else None,
    )


def _accounting(req: JobSubmit, user: str, mail_domain: str) -> _Accounting:
    """Whom the job is charged to and told about: account, QOS, wckey, comment, submit
    host, the cluster licenses it holds, and its mail (the user's own address by default)."""
    licenses = parse_licenses(req.licenses) if req.licenses else ()
    mail_type = parse_mail_type(req.mail_type) if req.mail_type is not None else 0
    mail_user = check_mail_user(req.mail_user.strip()) if req.mail_user is not None else ""
    return _Accounting(
        account=req.account,
        qos=req.qos,
        wckey=req.wckey,
        comment=req.comment,
        submit_host=req.submit_host,
        interactive=req.interactive,
        licenses=licenses,
        mail_type=mail_type,
        mail_user=mail_recipient(user, mail_user, mail_domain),
    )


def _check_dependency_ids(
    dependency: Dependency | None, bad: Callable[[str, str], InvalidRequest]
) -> None:
    """Whether every job id a dependency names can exist (at most INT64_MAX)."""
    for term in dependency.terms if dependency else ():
        for jid in term.job_ids:
            if jid > INT64_MAX:  # no job has it, and the database would fail on it
                raise bad(f"Job dependency problem: job {jid} does not exist", "dependency")


def _check_script_args(args: list[str], bad: Callable[[str, str], InvalidRequest]) -> None:
    """Arguments the node's execve takes: text that is UTF-8 (a lone surrogate is not),
    at most ``MAX_SCRIPT_ARGS_BYTES`` in all, so no one argument passes Linux's 128 KiB
    (MAX_ARG_STRLEN) and, with the environment, the whole stays under ARG_MAX."""
    size = 0
    for i, arg in enumerate(args):
        try:
            size += len(arg.encode()) + 1  # and its NUL
        except UnicodeEncodeError:
            raise bad(
                "is not valid Unicode (a lone surrogate); send UTF-8 text", f"script_args[{i}]"
            ) from None
    if size > MAX_SCRIPT_ARGS_BYTES:
        raise bad(
            f"the script's arguments are larger than {MAX_SCRIPT_ARGS_BYTES // 1024} KiB in all; "
            "pass large inputs in a file and its name as the argument",
            "script_args",
        )


def _output_paths(job: Job) -> tuple[str, str]:
    """stdout and stderr as the agent will expand them; ``%N`` stays as written until the
    job has a node."""
    fields = FilenameFields(
        job_id=job.id,
        name=job.spec.name,
        user=job.spec.user,
        node=job.allocation.nodes[0] if job.allocation else "%N",
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
    )
    out, err = output_paths(
        job.spec.stdout or "", job.spec.stderr, job.spec.workdir, fields,
        array=job.array_job_id is not None,
    )  # fmt: skip
    return out, err or out


def job_info(job: Job, cluster: Cluster) -> JobInfo:
    return JobInfo(**job_fields(job), **live_fields(job, cluster, cluster.clock.now()))


# the live fields worked out together (one usage sample, one profile)
_USAGE_FIELDS = frozenset(
    {
        "max_rss_bytes",
        "cpu_seconds",
        "user_cpu_seconds",
        "system_cpu_seconds",
        "rss_bytes",
        "usage_time",
        "gpu_usage",
    }
)
_PROFILE_FIELDS = frozenset({"profile", "profile_class", "latency_sensitive"})

# JobInfo's fields that depend on more than the job: the clock, its agent's latest usage
# sample, its dependencies' states (``live_fields``); the others change only with the job
# (``job_fields``), so the job list keeps their JSON while the job stays as it is
LIVE_FIELDS = (
    _USAGE_FIELDS
    | _PROFILE_FIELDS
    | {"eligible_time", "expected_start", "dependency_state", "suspended_seconds", "cost"}
)


def live_fields(
    job: Job, cluster: Cluster, now: float, only: frozenset[str] | None = None
) -> dict[str, Any]:
    """``JobInfo``'s ``LIVE_FIELDS`` of ``job`` at ``now``, every one of them named (and
    ``profile_fields``' two others); ``only``: just these of ``LIVE_FIELDS``, the others
    not worked out (a job list that asks for a few fields: ``hal.api.job_list``)."""
    if only is not None:
        return _some_live_fields(job, cluster, now, only)
    return {
        "eligible_time": job.shown_eligible_time(now),
        "expected_start": _expected_start(job, now),
        "rss_bytes": None,
        "usage_time": None,
        **usage_fields(job, cluster),
        **profile_fields(job, cluster),
        "dependency_state": dependency_shown(job, cluster),
        "suspended_seconds": suspended_seconds(job, now),
        "cost": job_cost(job, now),
    }


def _some_live_fields(
    job: Job, cluster: Cluster, now: float, only: frozenset[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "eligible_time" in only:
        out["eligible_time"] = job.shown_eligible_time(now)
    if "expected_start" in only:
        out["expected_start"] = _expected_start(job, now)
    if not only.isdisjoint(_USAGE_FIELDS):
        usage = {"rss_bytes": None, "usage_time": None, **usage_fields(job, cluster)}
        out.update((name, usage[name]) for name in only & _USAGE_FIELDS)
    if not only.isdisjoint(_PROFILE_FIELDS):
        profile = profile_fields(job, cluster)
        out.update((name, profile[name]) for name in only & _PROFILE_FIELDS)
    if "dependency_state" in only:
        out["dependency_state"] = dependency_shown(job, cluster)
    if "suspended_seconds" in only:
        out["suspended_seconds"] = suspended_seconds(job, now)
    if "cost" in only:
        out["cost"] = job_cost(job, now)
    return out


def live_settled(job: Job, only: frozenset[str] | None = None) -> bool:
    """Whether ``live_fields`` of ``job`` are the same at any time, whatever else
    changes: it ended, or it waits with no begin time, no dependency, no run so far and
    no suspension (most of a queue). One running, or whose fields follow the clock or
    other jobs, is not. ``only`` (``live_fields``'): of just these, where
    ``suspended_seconds`` alone (``squeue``'s) follows the clock only while the job is
    suspended (a running job's is the same until its next version)."""
    if only is not None and only <= {"suspended_seconds"}:
        return job.end_time is not None or SUSPENDED_AT not in job.extra
    if job.state.is_active:
        return False  # its agent's samples, its cost and suspension so far
    if job.end_time is None and SUSPENDED_AT in job.extra:
        return False
    if job.state is not JobState.PENDING:
        return job.end_time is not None
    spec = job.spec
    return (
        spec.dependency is None
        and spec.begin_time is None
        and job.start_time is None
        and job.reason not in WAITING_ON_OTHERS
    )


def _sizes(job: Job) -> dict[str, Any]:
    """What the job holds (its allocation), or asks for while it has none."""
    spec = job.spec
    if job.allocation is not None:
        total = job.allocation.total()
        return {
            "nodes": list(job.allocation.nodes),
            "node_count": len(job.allocation.nodes),
            "cpus": total.cpus,
            "memory_bytes": total.memory_bytes,
            "gpus": total.gpus,
        }
    count = spec.nodes_min
    per = spec.request_per_node(count)
    return {
        "nodes": [],
        "node_count": count,
        "cpus": per.cpus * count,
        "memory_bytes": per.memory_bytes * count,
        "gpus": per.gpus * count,
    }


def _paths(job: Job) -> dict[str, Any]:
    stdout, stderr = _output_paths(job)
    return {"stdout": stdout, "stderr": stderr}


def _preempt_time(job: Job) -> float | None:
    at = job.extra.get(preempt.PREEMPT_TIME)
    return float(at) if at is not None else None


# ``JobInfo``'s fields that only the job decides, each worked out alone (``job_fields``)
_OWN: dict[str, Callable[[Job], Any]] = {
    "id": lambda j: j.id,
    "display_id": lambda j: j.display_id,
    "het_job_id": lambda j: j.spec.het.job_id if j.spec.het else None,
    "het_job_offset": lambda j: j.spec.het.offset if j.spec.het else None,
    "het_job_id_set": lambda j: (
        f"{j.spec.het.job_id}-{j.spec.het.job_id + j.spec.het.size - 1}" if j.spec.het else None
    ),
    "array_job_id": lambda j: j.array_job_id,
    "array_task_id": lambda j: j.array_task_id,
    "array_max_running": lambda j: j.array_max_running,
    "name": lambda j: j.spec.name,
    "user": lambda j: j.spec.user,
    "account": lambda j: j.spec.account,
    "qos": lambda j: j.spec.qos,
    "partition": shown_partition,
    "state": lambda j: j.state.value,
    "state_code": lambda j: j.state.code,
    "reason": lambda j: j.reason.value,
    "priority": lambda j: j.shown_priority,
    "nice": lambda j: j.spec.nice,
    "submit_time": lambda j: j.submit_time,
    "deadline": lambda j: j.spec.deadline,
    "burst_after": lambda j: j.spec.burst_after,
    "start_time": lambda j: j.start_time,
    "end_time": lambda j: j.end_time,
    "time_limit_seconds": lambda j: j.time_limit_s,
    "memory_whole_node": lambda j: j.spec.memory_per_node_bytes == 0,
    "ntasks": lambda j: j.spec.ntasks,
    "cpus_per_task": lambda j: j.spec.cpus_per_task,
    "min_cpus_per_node": lambda j: j.spec.min_cpus_per_node,
    "exit_code": lambda j: j.exit_code,
    "exit_signal": lambda j: j.exit_signal,
    "workdir": lambda j: j.spec.workdir,
    "script_path": lambda j: j.spec.script_path,
    "script_args": lambda j: list(j.spec.script_args),
    "dependency": lambda j: str(j.spec.dependency) if j.spec.dependency else None,
    "requeue": lambda j: j.spec.requeue,
    "restarts": lambda j: j.restarts,
    "requeued_after": lambda j: j.extra.get(preempt.REQUEUED_AFTER),
    "preempt_time": _preempt_time,
    "interrupted_at": lambda j: interruptions.interrupted_at(j.extra),
    "lost_work_seconds": lambda j: interruptions.lost_work(j, j.state.value, j.end_time or 0.0),
    "comment": lambda j: j.spec.comment,
    "wckey": lambda j: j.spec.wckey,
    "cancelled_by": lambda j: j.cancelled_by,
    "constraint": lambda j: list(j.spec.constraint),
    "req_nodes": lambda j: list(j.spec.nodelist),
    "exc_nodes": lambda j: list(j.spec.exclude),
    "exclusive": lambda j: j.spec.exclusive,
    "exclusive_user": lambda j: j.spec.exclusive_user,
    "held": lambda j: j.held,
    "submit_host": lambda j: j.spec.submit_host,
    "switches": lambda j: j.spec.switches,
    "switch_wait_seconds": lambda j: j.spec.switch_wait_s,
    "topology": lambda j: str(j.spec.topology) if j.spec.topology else None,
    "placement": lambda j: j.extra.get(PLACEMENT_NOTE),
    "data": lambda j: list(j.spec.data),
    "artifacts": lambda j: [f"{a}" for a in j.spec.artifacts],
    "artifact_digests": lambda j: [f"{a}={a.sha256}" for a in pins_of(j.spec)],
    "artifact_aliases": lambda j: [
        f"{a.name}@{a.alias}={a.version}" for a in pins_of(j.spec) if a.alias
    ],
    "python_env": lambda j: j.spec.python_env.shown if j.spec.python_env else None,
    "container": lambda j: str(j.spec.container) if j.spec.container else None,
    "near": lambda j: [str(r) for r in j.spec.near],
    "apart": lambda j: [str(r) for r in j.spec.apart],
    "feedback_goal": lambda j: format_goals(j.spec.feedback_goals),
    "feedback_metrics": lambda j: j.spec.feedback_metrics,
    "reservation": lambda j: j.spec.reservation,
    "licenses": lambda j: format_licenses(j.spec.licenses),
    "time_min_seconds": lambda j: j.spec.time_min_s,
    "mail_type": lambda j: mail_type_names(j.spec.mail_type),
    "mail_user": lambda j: j.spec.mail_user,
    "cron": lambda j: j.spec.cron.schedule if j.spec.cron is not None else None,
    "interactive": lambda j: j.spec.interactive,
}
# ... and those worked out together, each set by one call
_OWN_GROUPS: tuple[tuple[frozenset[str], Callable[[Job], dict[str, Any]]], ...] = (
    (frozenset({"nodes", "node_count", "cpus", "memory_bytes", "gpus"}), _sizes),
    (frozenset({"stdout", "stderr"}), _paths),
)
# ``profile_fields``' two that are the job's own, not ``LIVE_FIELDS``
PROFILE_OWN = frozenset({"malleable", "feedback_action"})


def job_fields(job: Job) -> dict[str, Any]:
    """``JobInfo``'s fields that only ``job`` decides (all but ``LIVE_FIELDS`` and
    ``PROFILE_OWN``)."""
    out = {name: get(job) for name, get in _OWN.items()}
    for _, group in _OWN_GROUPS:
        out.update(group(job))
    return out


def job_fields_of(only: frozenset[str]) -> Callable[[Job], dict[str, Any]]:
    """``job_fields`` of just those named in ``only`` (a few more where one call works
    out several), the others not worked out: what a list that asks for some fields
    calls a job (``hal.api.job_list``)."""
    getters = [(name, _OWN[name]) for name in sorted(only) if name in _OWN]
    groups = [group for names, group in _OWN_GROUPS if not only.isdisjoint(names)]

    def fields(job: Job) -> dict[str, Any]:
        out = {name: get(job) for name, get in getters}
        for group in groups:
            out.update(group(job))
        return out

    return fields


def job_cost(job: Job, now: float) -> float | None:
    """What the job's cloud nodes cost in its current run (so far while it runs); None
    where it holds no priced node."""
    if job.start_time is None or RATE not in job.extra:
        return None
    return round(run_cost(rate_of(job.extra), job.start_time, job.end_time or now), 6)


def usage_fields(job: Job, cluster: Cluster) -> dict[str, Any]:
    """What the job used: measured when it ended, or so far while it runs (its agent's
    latest sample, ``sstat``), the CPU seconds' user and system parts too where its
    agent said them (None: an older agent's)."""
    sample = agents.usage_of(cluster, job)
    if sample is None:
        user, system = job.extra.get(USER_CPU), job.extra.get(SYSTEM_CPU)
        return {
            "max_rss_bytes": int(job.extra.get("max_rss", 0)),
            "cpu_seconds": float(job.extra.get("cpu_seconds", 0.0)),
            "user_cpu_seconds": float(user) if user is not None else None,
            "system_cpu_seconds": float(system) if system is not None else None,
            "gpu_usage": agents.gpu_usage_measured(job),
        }
    at, usage = sample
    return {
        "max_rss_bytes": usage.max_rss_bytes,
        "cpu_seconds": usage.cpu_seconds,
        "user_cpu_seconds": usage.user_cpu_seconds,
        "system_cpu_seconds": usage.system_cpu_seconds,
        "rss_bytes": usage.rss_bytes,
        "usage_time": at,
        "gpu_usage": usage.gpu,
    }


def profile_fields(job: Job, cluster: Cluster) -> dict[str, Any]:
    """How the job behaves (its agent's latest profile while it runs), the class that
    put it in (kept after it ends), and whether it is latency-sensitive."""
    sample = agents.usage_of(cluster, job)
    return {
        "profile": sample[1].profile if sample is not None else None,
        "profile_class": job.extra.get(PROFILE_CLASS),
        "latency_sensitive": job.extra.get(LATENCY_SENSITIVE) == "1",
        "malleable": str(job.spec.malleable) if job.spec.malleable else None,
        "feedback_action": job.extra.get(ACTION),
    }


def node_info(node: Node, cluster: Cluster, cloud: CloudNodes | None = None) -> NodeInfo:
    """A registered node; ``cloud``: the ``[cloud]`` groups' names, whose nodes carry
    Slurm's ``CLOUD`` flag (``hal.api.cloud_nodes``)."""
    return NodeInfo(**node_fields(node, cluster, cloud))


def node_fields(node: Node, cluster: Cluster, cloud: CloudNodes | None = None) -> dict[str, Any]:
    """``node_info``'s fields as plain values, in ``NodeInfo``'s order and with its types
    (a float where it has one), so that they serialise to its JSON without a model:
    ``cloud_nodes.node_list_json``."""
    used = cluster.usage.get(node.name)
    alloc = used.allocated if used else None
    partitions = [p.name for p in cluster.partitions.values() if p.contains(node.name)]
    session = cluster.agent_sessions.get(node.name)
    display, flags = cluster.node_display_state(node), node_state_flags(cluster, node)
    display = power_display(cluster, node, display)
    if cloud is not None:
        display, flags = cloud.registered(node, display, flags)
    cpu_load = session.cpu_load if session else None
    return {
        "name": node.name,
        "state": node.state.value,
        "display_state": display,
        "state_flags": flags,
        "reason": node.reason,
        "reason_user": node.reason_user,
        "reason_time": None if node.reason_time is None else float(node.reason_time),
        "cpus": node.resources.cpus,
        "cpus_alloc": alloc.cpus if alloc else 0,
        "memory_bytes": node.resources.memory_bytes,
        "memory_alloc_bytes": alloc.memory_bytes if alloc else 0,
        "free_memory_bytes": session.free_memory_bytes if session else None,
        "cpu_load": None if cpu_load is None else float(cpu_load),
        "gpus": node.resources.gpus,
        "gpus_alloc": alloc.gpus if alloc else 0,
        "gpu_ids_alloc": sorted(used.gpu_ids) if used else [],
        "gpu_model": node.gpu_model,
        "gpu_islands": [list(i) for i in node.gpu_islands],
        "topology_labels": dict(node.labels),
        "nvlink_domain": node.nvlink_domain,
        "features": list(node.features),
        "partitions": partitions,
        # the agent's last contact (its latest sync), not only its registration
        "last_heartbeat": float(last_contact(cluster, node) or node.last_heartbeat),
        "address": node.address,
        "jobs": sorted(used.jobs) if used else [],
    }


def topology_info(cluster: Cluster) -> TopologyInfo:
    from hal.api.topology_view import with_node_topology

    return with_node_topology(_switch_info(cluster), cluster)


def _switch_info(cluster: Cluster) -> TopologyInfo:
    topo = cluster.config.topology
    if topo is None or not topo.has_tree:
        return TopologyInfo(configured=False)
    nodes = cluster.nodes

    def free(name: str) -> bool:
        node = nodes.get(name)
        return node is not None and cluster.node_display_state(node) == "idle"

    below: dict[str, list[str]] = {}
    level: dict[str, int] = {}

    def walk(name: str) -> None:  # children first: totals and levels add up the tree
        s = topo.switch(name)
        under = list(s.nodes)
        height = 0
        for child in s.switches:
            walk(child)
            under += below[child]
            height = max(height, level[child] + 1)
        below[name], level[name] = under, height

    roots = [s.name for s in topo.roots()]
    for root in roots:
        walk(root)
    listed = set(topo.paths())
    return TopologyInfo(
        configured=True,
        level_names=[topo.level_name(k) for k in range(topo.depth)],
        roots=roots,
        switches=[
            SwitchInfo(
                name=s.name,
                level=level[s.name],
                nodes=list(s.nodes),
                switches=list(s.switches),
                nodes_total=len(below[s.name]),
                nodes_free=sum(free(n) for n in below[s.name]),
                link_speed=s.link_speed,
            )
            for s in topo.switches
        ],
        blocks=[
            BlockInfo(name=b.name, nodes=list(b.nodes), nodes_free=sum(free(n) for n in b.nodes))
            for b in topo.blocks
        ],
        block_sizes=list(topo.block_sizes),
        unplaced=sorted(set(nodes) - listed),
        unregistered=sorted(listed - set(nodes)),
    )


def partition_info(
    p: Partition,
    cluster: Cluster,
    preemption: PreemptionPolicy | None = None,
    cloud: CloudNodes | None = None,
) -> PartitionInfo:
    """``preemption``: the server's ``[preemption]``, whose mode is every partition's
    PreemptMode (None: off); ``cloud``: the ``[cloud]`` groups' names, which a partition
    holds whether or not their nodes exist yet (as Slurm's holds its cloud nodes)."""
    names = set(cluster.nodes) | set(cloud.groups if cloud is not None else ())
    nodes = [n for n in sorted(names) if p.contains(n)]
    return PartitionInfo(
        name=p.name,
        default=p.default or p.name == cluster.default_partition(),
        up=p.state is PartitionState.UP,
        state=p.state.value,
        max_time_seconds=p.max_time_s,
        default_time_seconds=p.default_time_s,  # as configured: Slurm shows NONE for 0
        max_nodes=p.max_nodes,
        nodes=nodes,
        priority_tier=p.priority_tier,
        priority_job_factor=p.priority_job_factor,
        preempt_mode=preemption.mode.upper() if preemption and preemption.enabled else "OFF",
    )


def _expected_start(job: Job, now: float) -> float | None:
    """The scheduler's expected start; for a pending job it has none for (held, say)
    whose begin time is ahead, that begin time, as Slurm's StartTime shows it."""
    if job.expected_start is not None or job.state is not JobState.PENDING:
        return job.expected_start
    begin = job.spec.begin_time
    return begin if begin is not None and begin > now else None
