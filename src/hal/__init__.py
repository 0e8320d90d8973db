"""HAL: a workload scheduler for HPC and AI clusters.

The package is split into planes (see ARCHITECTURE.md and docs/adr/): ``core`` is the pure
domain model, ``scheduler`` decides, ``state`` remembers, ``api`` serves, ``agent`` runs
processes, ``compat`` speaks Slurm's dialect, ``client`` and ``cli`` are the user's side.
"""

__version__ = "0.1.0"
