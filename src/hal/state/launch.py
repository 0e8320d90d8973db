"""Build the ``Launch`` instruction for a job's batch host, with the job-level environment.

The server sets what it knows about the whole job (ids, partition, tasks, array geometry);
the agent adds what only the node knows (hostname, node index, CPUs on node, GPUs, pids).
Both ``SLURM_*`` and ``HAL_*`` names are exported so unchanged Slurm scripts and workflow
tools work (../shared/reference/slurm-conventions.md §1.5).
"""

from __future__ import annotations

import functools
import pwd
import re
from collections.abc import Sequence

import hostlist

from hal.core.container import Container
from hal.core.job import Allocation, Job, JobSpec
from hal.core.resources import MiB
from hal.observe.traceids import traceparent
from hal.slurm.job_variables import describes_a_job
from hal.slurm.steps import per_node_counts, tasks_per_node
from hal.wire.agent import ArtifactPin, ContainerPin, Launch, PythonEnvPin


@functools.lru_cache(maxsize=1024)
def unix_ids(user: str) -> tuple[int, int] | None:
    """(uid, gid) of ``user`` on this host, or None. Cached: every launch needs it and
    each lookup reads the passwd database."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def cpus_per_node(allocation: Allocation) -> str:
    """``SLURM_JOB_CPUS_PER_NODE``: the job's CPUs on each node in node-list order, as
    Slurm writes them (``2(x2)``, ``2,1``)."""
    if len(allocation.nodes) == 1:  # most jobs: no host list to sort (hostlist's regexes
        return per_node_counts(r.cpus for r in allocation.per_node)  # cost a burst seconds)
    cpus = dict(zip(allocation.nodes, (r.cpus for r in allocation.per_node), strict=True))
    order = hostlist.expand_hostlist(hostlist.collect_hostlist(list(allocation.nodes)))
    return per_node_counts(cpus[n] for n in order)


def het_environment(components: Sequence[Job]) -> dict[str, str]:
    """Slurm's hetjob variables for the batch script (component 0's first node):
    ``SLURM_HET_SIZE``, the whole job's node list and count, and per component ``n``
    ``SLURM_*_HET_GROUP_n`` (job id, node list, node count, tasks, CPUs per task,
    tasks per node, partition, memory per node)."""
    env: dict[str, str] = {"SLURM_HET_SIZE": str(len(components))}
    everyone: list[str] = []
    for n, job in enumerate(components):
        spec = job.spec
        nodes = list(job.allocation.nodes) if job.allocation else []
        everyone.extend(x for x in nodes if x not in everyone)
        count = len(nodes) or 1
        nodelist = hostlist.collect_hostlist(nodes) if nodes else ""
        group = {
            "SLURM_JOB_ID": str(job.id),
            "SLURM_JOB_NODELIST": nodelist,
            "SLURM_NODELIST": nodelist,
            "SLURM_JOB_NUM_NODES": str(count),
            "SLURM_NNODES": str(count),
            "SLURM_NTASKS": str(spec.ntasks),
            "SLURM_NPROCS": str(spec.ntasks),
            "SLURM_CPUS_PER_TASK": str(spec.cpus_per_task),
            "SLURM_TASKS_PER_NODE": tasks_per_node(spec.ntasks, spec.ntasks_per_node, count),
            "SLURM_JOB_PARTITION": job.partition,
        }
        if job.allocation is not None and job.allocation.per_node:
            group["SLURM_JOB_CPUS_PER_NODE"] = cpus_per_node(job.allocation)
            mem = job.allocation.per_node[0].memory_bytes
            if mem:
                group["SLURM_MEM_PER_NODE"] = str(mem // MiB)
        for key, value in group.items():
            env[f"{key}_HET_GROUP_{n}"] = value
    whole = hostlist.collect_hostlist(everyone) if everyone else ""
    env["SLURM_JOB_NODELIST"] = env["SLURM_NODELIST"] = whole
    env["SLURM_JOB_NUM_NODES"] = env["SLURM_NNODES"] = str(len(everyone))
    return env


def job_environment(job: Job, cluster_name: str, het: Sequence[Job] = ()) -> dict[str, str]:
    """``het``: all components of the het job ``job`` is component 0 of."""
    spec = job.spec
    env = {k: v for k, v in spec.environment if not describes_a_job(k)}
    if het:
        env.update(het_environment(het))
    nodes = len(job.allocation.nodes) if job.allocation else 1
    common = {
        "JOB_ID": str(job.id),
        "JOB_NAME": spec.name,
        "JOB_PARTITION": job.partition,
        "JOB_USER": spec.user,
        "CLUSTER_NAME": cluster_name,
        "SUBMIT_DIR": spec.workdir,
        "SUBMIT_HOST": spec.submit_host,
        "NTASKS": str(spec.ntasks),
        "NPROCS": str(spec.ntasks),
        "TASKS_PER_NODE": tasks_per_node(spec.ntasks, spec.ntasks_per_node, nodes),
        "PRIO_PROCESS": "0",
        "JOB_TIME_LIMIT": str(job.time_limit_s),
        "RESTART_COUNT": str(job.restarts),
    }
    # only where -c and --ntasks-per-node were given, as Slurm 22.05.8 sets them: a
    # script's ${SLURM_CPUS_PER_TASK:-4} got 1. sbatch sends -c's value in
    # the environment; a client that does not, any -c above 1.
    cpus_per_task = str(spec.cpus_per_task)
    if spec.cpus_per_task != 1 or ("SLURM_CPUS_PER_TASK", cpus_per_task) in spec.environment:
        common["CPUS_PER_TASK"] = cpus_per_task
    if spec.ntasks_per_node:
        common["NTASKS_PER_NODE"] = str(spec.ntasks_per_node)
    # --mem-per-cpu and --mem-per-gpu as Slurm exports them, in MiB (the agent adds the
    # node's total, SLURM_MEM_PER_NODE)
    if spec.memory_per_cpu_bytes:
        common["MEM_PER_CPU"] = str(spec.memory_per_cpu_bytes // MiB)
    if spec.memory_per_gpu_bytes:
        common["MEM_PER_GPU"] = str(spec.memory_per_gpu_bytes // MiB)
    if spec.account:
        common["JOB_ACCOUNT"] = spec.account
    if spec.qos:
        common["JOB_QOS"] = spec.qos
    if job.array_job_id is not None and job.array_task_id is not None:
        common["ARRAY_JOB_ID"] = str(job.array_job_id)
        common["ARRAY_TASK_ID"] = str(job.array_task_id)
        if spec.array is not None:
            idx = spec.array.indices
            common["ARRAY_TASK_COUNT"] = str(len(idx))
            common["ARRAY_TASK_MIN"] = str(min(idx))
            common["ARRAY_TASK_MAX"] = str(max(idx))
            # the step written in the spec (its first ``:N``), else 1, as Slurm 22.05.8:
            # ``1,3,7-9:2`` → 2, ``1,3,5`` → 1 (not the gap the indices happen to share)
            written = re.search(r":(\d+)", spec.array.text)
            common["ARRAY_TASK_STEP"] = written.group(1) if written else "1"
    if job.allocation is not None and job.allocation.per_node:
        common["JOB_CPUS_PER_NODE"] = cpus_per_node(job.allocation)
    for key, value in common.items():
        env.setdefault("SLURM_" + key, value)
        env.setdefault("HAL_" + key, value)
    env["SLURM_JOBID"] = str(job.id)
    if spec.open_mode:  # sbatch --open-mode, for the job's sruns (Slurm's a or t)
        env["SLURM_OPEN_MODE"] = spec.open_mode[0]
    # W3C trace context for whatever the job runs (OTel's environment carrier): the
    # attempt's ``job.run`` span. A TRACEPARENT exported from the submitter's shell is
    # replaced (the job span links to it); its TRACESTATE belongs to that trace, so it goes.
    env["TRACEPARENT"] = traceparent(cluster_name, job.id, job.submit_time, job.restarts)
    env.pop("TRACESTATE", None)
    ids = unix_ids(spec.user)
    if ids is not None:
        env.setdefault("SLURM_JOB_UID", str(ids[0]))
        env.setdefault("SLURM_JOB_GID", str(ids[1]))
    return env


def build_launch(job: Job, cluster_name: str, het: Sequence[Job] = ()) -> Launch:
    assert job.allocation is not None
    spec = job.spec
    uid, gid = unix_ids(spec.user) or (None, None)
    first = job.allocation.per_node[0]
    return Launch(
        job_id=job.id,
        attempt=job.restarts,
        name=spec.name,
        user=spec.user,
        uid=uid,
        gid=gid,
        script=spec.script,
        script_args=list(spec.script_args),  # a het job's: component 0's, as its script's
        workdir=spec.workdir,
        environment=job_environment(job, cluster_name, het),
        stdout=spec.stdout or "",  # "" → Slurm's default name, applied by the agent
        stderr=spec.stderr,
        open_mode=spec.open_mode,
        time_limit_seconds=job.time_limit_s,
        memory_bytes=first.memory_bytes,
        mem_per_node_variable=bool(spec.memory_per_node_bytes),
        cpus=first.cpus,
        gpu_ids=list(job.allocation.gpu_ids[0]) if job.allocation.gpu_ids else [],
        nodes=list(job.allocation.nodes),
        node_index=0,
        signal=(
            f"{'B:' if spec.signal.batch_only else ''}{spec.signal.signum}"
            f"@{spec.signal.seconds_before}"
            if spec.signal
            else None
        ),
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        artifacts=artifact_pins(spec),
        python_env=python_env_pin(spec),
        container=container_pin(spec.container),
        feedback_metrics=spec.feedback_metrics,
    )


def container_pin(container: Container | None) -> ContainerPin | None:
    """What the job's nodes run it in: its image's pin, or a bundle (None: no container)."""
    if container is None:
        return None
    i = container.image
    image = ArtifactPin(name=i.name, version=i.version, sha256=i.sha256, kind=i.kind) if i else None
    return ContainerPin(image=image, bundle=container.bundle)


def artifact_pins(spec: JobSpec) -> list[ArtifactPin]:
    """What the job's nodes deploy: its pinned artifacts."""
    return [
        ArtifactPin(name=a.name, version=a.version, sha256=a.sha256, kind=a.kind)
        for a in spec.artifacts
    ]


def python_env_pin(spec: JobSpec) -> PythonEnvPin | None:
    """The lock its nodes build an environment from (None: it names none)."""
    if spec.python_env is None:
        return None
    env = spec.python_env
    a = env.artifact  # a conda-pack archive's
    artifact = (
        ArtifactPin(name=a.name, version=a.version, sha256=a.sha256, kind=a.kind) if a else None
    )
    return PythonEnvPin(kind=env.kind, sha256=env.sha256, files=dict(env.files), artifact=artifact)
