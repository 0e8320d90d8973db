"""What srun reads besides its options: the job (or het job component) it runs in, from
the environment, and ``--multi-prog``'s file.

A het job's script (docs/user/hetjobs.md) sees every component's nodes in
``SLURM_JOB_NODELIST``; a step runs in one component, ``--het-group=N`` (default 0), whose
id, nodes and tasks are ``SLURM_JOB_ID_HET_GROUP_N``, ``SLURM_JOB_NODELIST_HET_GROUP_N``
and ``SLURM_NTASKS_HET_GROUP_N``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from hal.compat.seam import Console
from hal.core.errors import InvalidRequest
from hal.slurm.multi_prog import MultiProg, parse_multi_prog
from hal.slurm.syntax import expand_hostlist


@dataclass(frozen=True, slots=True)
class StepJob:
    """The job a step runs in, as srun's environment describes it."""

    job_id: int
    nodes: list[str]
    ntasks: int  # the job's tasks (SLURM_NTASKS), at least 1
    component: int | None = None  # the het job component (None: not a het job)


def step_job(env: Mapping[str, str], het_group: int | None) -> StepJob:
    """The job (component) the step runs in; raises ``ValueError`` for a job id that is
    none, ``InvalidRequest`` for a component the job does not have."""
    here = env.get("SLURMD_NODENAME", "")
    size = env.get("SLURM_HET_SIZE", "")
    if not size.isdigit():
        if het_group:
            raise InvalidRequest(
                f"--het-group={het_group}: job {env['SLURM_JOB_ID']} is not a "
                "heterogeneous job (it has component 0 only); leave --het-group out"
            )
        nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST", ""), field="SLURM_JOB_NODELIST")
        return StepJob(int(env["SLURM_JOB_ID"]), nodes or [here], _count(env, "SLURM_NTASKS"))
    group = het_group or 0
    if group >= int(size):
        raise InvalidRequest(
            f"--het-group={group}: het job {env['SLURM_JOB_ID']} has components 0 to "
            f"{int(size) - 1}; name one of them"
        )
    suffix = f"_HET_GROUP_{group}"
    nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST" + suffix, ""), field="nodelist")
    job_id = int(env.get("SLURM_JOB_ID" + suffix, ""))
    return StepJob(job_id, nodes or [here], _count(env, "SLURM_NTASKS" + suffix), group)


def _count(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else 1


def read_multi_prog(path: str, console: Console) -> MultiProg:
    """``--multi-prog``'s file (relative to srun's working directory), parsed; raises
    ``InvalidRequest`` with srun's message for one it cannot open or a line it refuses."""
    try:
        with open(os.path.join(console.cwd or os.getcwd(), path)) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        raise InvalidRequest(f"Could not open multi_prog config file {path}") from None
    return parse_multi_prog(text, path)


def multi_prog_tasks(programs: MultiProg, asked: int | None, job_ntasks: int) -> int | None:
    """The step's task count: ``-n``, else (the job left its count at one, as Slurm
    leaves ``SLURM_NTASKS`` unset) one more than the highest rank the file names, as
    Slurm's srun sets it; else None (srun's default)."""
    if asked is not None or job_ntasks > 1:
        return asked
    highest = programs.highest_rank()
    return None if highest is None else highest + 1
