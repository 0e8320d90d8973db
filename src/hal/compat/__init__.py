"""Slurm-compatible commands: ``sbatch``, ``squeue``, ``scancel``, ``sinfo``, ``sacct`` and
``scontrol``, with ``#SBATCH`` parsing and Slurm's exact output formats.

Users and workflow tools (Snakemake, Parsl, Nextflow, PSI/J, dask-jobqueue) parse these
outputs, so strings here match Slurm 22.05 character for character unless a comment says
otherwise. Entry point: ``hal.compat.commands.run(command, argv, ...)``.

Imports ``hal.core``, ``hal.slurm``, ``hal.wire`` and ``hal.client`` only; never the server.

Start-up is part of the contract: workflow tools run ``sbatch`` and ``squeue`` once per
job, each a new process: the target for these two is 3× a bare interpreter's start
(issue 51; ``hal bench submit`` measures it). Their modules import, at run time, neither
the wire schemas (pydantic; sbatch sends ``SbatchRequest.body`` as JSON, squeue reads
records: ``HalClient.jobs(validate=False)``; a job list of 2 MiB or more is decoded by
msgspec, whose import, with ``typing``, ``re`` and ``datetime``, its parse pays back:
ADR 0032) nor ``typing``, ``dataclasses``,
``pathlib``, ``datetime``, ``json``, ``socket``, ``re``, ``enum``, ``functools`` or
``collections``: their small types are plain classes, annotations come from ``if
TYPE_CHECKING:`` blocks (``TYPE_CHECKING = False`` at run time), the client speaks
through ``_socket`` and ``_json`` (``hal.client.cjson``), the shapes read on every run
are plain functions (``hal.slurm.syntax.is_digits`` and the like, each checked against
the pattern it stands for), state names come from ``hal.core.state_names``, and what
only a rarer option needs (``re`` included) is imported where that option is read.
tests/unit/compat/test_start_imports.py checks what each loads. The commands that read
and print without sending a model (``sacct``, ``scontrol show job``, ``sinfo``, ``seff``,
``sstat``, ``sprio``, ``sshare``) read the server's answers as records too (the client's
``validate=False``, ``hal.client.records.read``), so they start without pydantic; the
standard library's modules they load are not held to sbatch's rule.
"""
