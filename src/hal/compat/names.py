"""The Slurm command names HAL answers to (``hal squeue`` ...) and installs as shims.

Kept apart from the commands themselves so that ``hal``'s entry point can dispatch on
them without importing any command."""

SLURM_COMMANDS = (
    "sbatch",
    "squeue",
    "scancel",
    "sinfo",
    "sacct",
    "scontrol",
    "srun",
    "salloc",
    "sprio",
    "sshare",
    "seff",
    "sstat",
    "sacctmgr",
    "sdiag",
    "scrontab",
    "sbcast",
)

# salloc sets it in its command's environment (the allocation's job id); srun there runs
# on the host salloc was started on, not on the allocation's first node as in a batch
# job, so it creates every step through the control plane (hal.compat.srun)
SALLOC_JOB_VARIABLE = "HAL_SALLOC_JOB_ID"
