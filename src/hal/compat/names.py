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
    "sprio",
    "sshare",
    "seff",
    "sstat",
)
