"""Slurm-compatible commands: ``sbatch``, ``squeue``, ``scancel``, ``sinfo``, ``sacct`` and
``scontrol``, with ``#SBATCH`` parsing and Slurm's exact output formats.

Users and workflow tools (Snakemake, Parsl, Nextflow, PSI/J, dask-jobqueue) parse these
outputs, so strings here match Slurm 22.05 character for character unless a comment says
otherwise. Entry point: ``hal.compat.commands.run(command, argv, ...)``.

Imports ``hal.core``, ``hal.wire`` and ``hal.client`` only; never the server.
"""
