"""The environment variables that describe one job (``SLURM_JOB_ID``, its node list,
tasks, array index...): dropped from what a submitter exports before a new job gets its
own, by the server (``hal.state.launch``) and by ``salloc`` (``hal.compat.salloc``)."""

from __future__ import annotations

# A login-like minimum PATH: a job or step given none of the caller's variables
# (``--export=NONE``) still finds ``sh`` and the usual commands.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# What HAL sets for each job, in ``hal.state.launch`` and (node-local) in
# ``hal.agent.environment``, and what ``salloc`` sets for its command. A copy exported
# from the submitter's shell (sbatch run inside another job; even --export=NONE
# keeps SLURM_*) describes that other job: Slurm overwrites such variables, and HAL drops
# them before setting the job's own, or the agent (whose values yield to the server's)
# would leave a child job with its parent's SLURM_JOB_ID, node list or array index.
# SLURM_SUBMIT_DIR and SLURM_SUBMIT_HOST stay: they say where sbatch ran, and Slurm's
# sbatch puts them in the environment it sends (HAL's server fills them in otherwise).
_JOB_PREFIXES = (
    "SLURM_JOB_",
    "SLURM_ARRAY_",
    "SLURM_HET_",
    "SLURM_STEP_",
    "HAL_JOB_",
    "HAL_ARRAY_",
)
_JOB_VARIABLES = frozenset(
    {
        "SLURM_JOBID",
        "SLURMD_NODENAME",
        "SLURM_NODEID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_TASK_PID",
        "SLURM_CPUS_ON_NODE",
        "SLURM_NODELIST",
        "SLURM_NNODES",
        "SLURM_NTASKS",
        "SLURM_NPROCS",
        "SLURM_TASKS_PER_NODE",
        "SLURM_NTASKS_PER_NODE",
        "SLURM_GTIDS",
        "SLURM_TOPOLOGY_ADDR",
        "SLURM_TOPOLOGY_ADDR_PATTERN",
        "SLURM_OPEN_MODE",
        "SLURM_CPUS_PER_TASK",
        "SLURM_MEM_PER_NODE",
        "SLURM_MEM_PER_CPU",
        "SLURM_MEM_PER_GPU",
        "SLURM_GPUS_ON_NODE",
        "SLURM_PRIO_PROCESS",
        "SLURM_RESTART_COUNT",
        "SLURM_CLUSTER_NAME",
        "HAL_NODE",
        "HAL_NODE_INDEX",
        "HAL_CPUS_ON_NODE",
        "HAL_MEM_PER_NODE",
        "HAL_MEM_PER_CPU",
        "HAL_MEM_PER_GPU",
        "HAL_GPUS_ON_NODE",
        "HAL_NTASKS",
        "HAL_NPROCS",
        "HAL_TASKS_PER_NODE",
        "HAL_NTASKS_PER_NODE",
        "HAL_CPUS_PER_TASK",
        "HAL_PRIO_PROCESS",
        "HAL_RESTART_COUNT",
        "HAL_CLUSTER_NAME",
        "HAL_SALLOC_JOB_ID",  # salloc's mark for srun (hal.compat.srun)
    }
)


def describes_a_job(name: str) -> bool:
    """Whether the variable ``name`` describes one job (its ids, nodes, tasks): not to be
    passed on to another."""
    return name in _JOB_VARIABLES or name.startswith(_JOB_PREFIXES) or "_HET_GROUP_" in name
