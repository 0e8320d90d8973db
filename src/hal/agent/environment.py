"""The environment a batch script runs with.

It starts from ``Launch.environment`` (the submitter's exported variables plus the
cluster-wide ``SLURM_*``/``HAL_*`` ones the server computed) and adds what only the node
knows: its name and index, this node's CPUs, memory and GPUs, and the job's node list.
Server-provided values win — the server may know better (e.g. ``SLURM_JOB_CPUS_PER_NODE``
for a multi-node job) — with one exception: the GPU variables. The GPU ids are assigned by
the server *to this node*, so a ``CUDA_VISIBLE_DEVICES`` inherited from the submitter's
shell would point the job at somebody else's GPUs; the allocation always wins.

``HAL_URL`` is where the job's own commands (``hal feedback``, ``srun``, ``sbatch``) reach
the control plane: the submitter's, exported with the job, else the server's own address
(``Launch.hal_url_default``), which the agent replaces by every server address it was
given, the leader first (``with_server_addresses``): after a takeover the job's commands
find the new leader as the agent does (docs/admin/failover.md).

``SLURM_TASK_PID`` is the batch shell's own pid, so the job process adds it itself just
before exec (see ``supervisor``). ``HAL_JOB_MARKER`` names the job to the agent running
it (agent, job, attempt: unique on the host); it finds the job's processes by it if the
step supervisor dies (``remains``), so the job's own value always wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import hostlist

from hal.client.servers import server_urls
from hal.core.resources import MiB
from hal.slurm.job_variables import DEFAULT_PATH
from hal.wire.agent import Launch

MARKER = "HAL_JOB_MARKER"


def with_server_addresses(launch: Launch, servers: Sequence[str]) -> Launch:
    """``launch`` with every address of ``servers`` (the agent's, the leader first) in
    its ``HAL_URL``, where that is the server's own address rather than the submitter's
    (``hal_url_default``), followed by that address where the agent knows it by no
    other; ``launch`` itself otherwise. An agent given one address leaves the server's
    own (it has no other to follow, and a site of one server keeps one address)."""
    if not launch.hal_url_default or len(servers) < 2:
        return launch
    urls = server_urls([*servers, launch.environment.get("HAL_URL", "")])
    environment = {**launch.environment, "HAL_URL": ",".join(urls)}
    return launch.model_copy(update={"environment": environment, "hal_url_default": False})


def job_marker(agent: str, job_id: int, attempt: int) -> str:
    """``MARKER``'s value; ``agent`` is the agent's name on the host (``agent_cgroup_name``)."""
    return f"{agent}/{job_id}.{attempt}"


def job_environment(
    launch: Launch,
    node: str,
    *,
    home: str = "",
    shell: str = "",
    agent: str = "",
    gpus_isolated: bool = False,
) -> dict[str, str]:
    """The job's environment on ``node``. ``gpus_isolated``: the job can open only its
    own GPUs' device files (``hal.agent.devices``), so CUDA numbers them from 0."""
    env = dict(launch.environment)
    nodelist = hostlist.collect_hostlist(launch.nodes) if launch.nodes else node
    cpus = str(launch.cpus)
    local: dict[str, str] = {
        "ENVIRONMENT": "BATCH",
        "SLURMD_NODENAME": node,
        "SLURM_NODEID": str(launch.node_index),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_CPUS_ON_NODE": cpus,
        "SLURM_JOB_CPUS_PER_NODE": cpus,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_NNODES": str(len(launch.nodes) or 1),
        "SLURM_JOB_NUM_NODES": str(len(launch.nodes) or 1),
        "SLURM_JOB_ID": str(launch.job_id),
        "SLURM_JOBID": str(launch.job_id),
        "SLURM_JOB_NAME": launch.name,
        "SLURM_JOB_USER": launch.user,
        "SLURM_SUBMIT_DIR": launch.workdir,
        "HAL_JOB_ID": str(launch.job_id),
        "HAL_JOB_NAME": launch.name,
        "HAL_JOB_ATTEMPT": str(launch.attempt),
        "HAL_NODE": node,
        "HAL_NODE_INDEX": str(launch.node_index),
        "HAL_JOB_NODELIST": nodelist,
        "HAL_CPUS_ON_NODE": cpus,
        # as slurmstepd sets them (Slurm 22.05.8): the node's task ids (the
        # batch script is 0; a step's own, set where its tasks start), the node's place
        # in the topology (flat), a TMPDIR where the job's environment has none
        "SLURM_GTIDS": "0",
        "SLURM_TOPOLOGY_ADDR": node,
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
        "TMPDIR": "/tmp",
    }
    if launch.memory_bytes:
        local["HAL_MEM_PER_NODE"] = str(launch.memory_bytes // MiB)
    if launch.memory_bytes and launch.mem_per_node_variable:
        local["SLURM_MEM_PER_NODE"] = str(launch.memory_bytes // MiB)
    if launch.attempt:
        local["SLURM_RESTART_COUNT"] = str(launch.attempt)
    if launch.uid is not None:
        local["SLURM_JOB_UID"] = str(launch.uid)
    if launch.gid is not None:
        local["SLURM_JOB_GID"] = str(launch.gid)
    if launch.array_job_id is not None and launch.array_task_id is not None:
        local["SLURM_ARRAY_JOB_ID"] = str(launch.array_job_id)
        local["SLURM_ARRAY_TASK_ID"] = str(launch.array_task_id)
        local["HAL_ARRAY_JOB_ID"] = str(launch.array_job_id)
        local["HAL_ARRAY_TASK_ID"] = str(launch.array_task_id)
    # A login-like minimum so that `--export=NONE` jobs still find `sh` and their home.
    local["PATH"] = DEFAULT_PATH
    local["USER"] = launch.user
    local["LOGNAME"] = launch.user
    if home:
        local["HOME"] = home
    if shell:
        local["SHELL"] = shell
    for key, value in local.items():
        env.setdefault(key, value)
    if agent:
        env[MARKER] = job_marker(agent, launch.job_id, launch.attempt)
    if launch.gpu_ids:
        ids = ",".join(str(g) for g in launch.gpu_ids)
        # SLURM_JOB_GPUS stays the node's indices whatever CUDA is told
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices(launch.gpu_ids, isolated=gpus_isolated)
        env["SLURM_JOB_GPUS"] = ids
        env["HAL_JOB_GPUS"] = ids
        env["SLURM_GPUS_ON_NODE"] = str(len(launch.gpu_ids))
        env["HAL_GPUS_ON_NODE"] = str(len(launch.gpu_ids))
    return env


def step_gpu_environment(
    env: dict[str, str], job_gpus: list[int], step_gpus: list[int] | None, *, isolated: bool
) -> None:
    """A step's GPU variables on this node, as Slurm 22.05.8 sets them
    (docs/slurm-checks.md): ``SLURM_STEP_GPUS``, the step's GPUs (the job's where it
    asked for none); a step with its own (``step_gpus``, srun ``--gpus``...) also has
    them as ``CUDA_VISIBLE_DEVICES`` (from 0 where ``isolated``: its device cgroup
    hides the others) and ``SLURM_GPUS_ON_NODE``. ``SLURM_JOB_GPUS`` stays the job's."""
    gpus = job_gpus if step_gpus is None else step_gpus
    if step_gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_devices(gpus, isolated=isolated)
        env["SLURM_GPUS_ON_NODE"] = env["HAL_GPUS_ON_NODE"] = str(len(gpus))
    if gpus:
        env["SLURM_STEP_GPUS"] = ",".join(str(g) for g in gpus)


def task_gpu_environments(
    step_gpus: list[int], per_task: int, tasks: int, *, isolated: bool
) -> tuple[dict[str, str], ...]:
    """Each of a node's ``tasks`` its own GPUs, where the step asked for them per task
    (srun ``--gpus-per-task=N``), as Slurm binds them (``--gpu-bind=per_task:N``, implied
    there): the node's i-th task has the step's GPUs i*N..(i+1)*N-1 as its
    ``CUDA_VISIBLE_DEVICES`` (numbered as the step's are) and ``SLURM_STEP_GPUS``."""
    found = []
    for i in range(tasks):
        first = i * per_task
        own = step_gpus[first : first + per_task]
        found.append(
            {
                "CUDA_VISIBLE_DEVICES": cuda_devices(own, isolated=isolated, first=first),
                "SLURM_STEP_GPUS": ",".join(str(g) for g in own),
            }
        )
    return tuple(found)


def cuda_devices(gpus: list[int], *, isolated: bool, first: int = 0) -> str:
    """``CUDA_VISIBLE_DEVICES`` for ``gpus`` (the node's indices): themselves where every
    GPU is visible; where a device cgroup hides the others, CUDA numbers the ones left
    from 0 (gres.shtml), so their places among them, from ``first``."""
    seen = range(first, first + len(gpus)) if isolated else gpus
    return ",".join(str(g) for g in seen)
