"""Turn a ``Launch`` into a ``StepPlan``: who runs what, where, with which environment.

All look-ups that may take locks or read databases (the password and group files, NSS)
happen here, in the agent, before the fork.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass, replace
from functools import lru_cache

from hal.agent.environment import job_environment
from hal.agent.store import SCRIPT_FILE
from hal.agent.supervisor import StepPlan
from hal.core.errors import InvalidRequest
from hal.slurm.filenames import FilenameFields, expand_filename, output_paths
from hal.slurm.syntax import parse_umask
from hal.wire.agent import Launch, StepLaunch

DEFAULT_SHELL = "/bin/sh"


class LaunchError(Exception):
    """The launch cannot be carried out (unknown user, bad script); the message says why
    and goes to the server in a ``launch_failed`` report."""


@dataclass(frozen=True, slots=True)
class RunAs:
    uid: int | None  # None: the agent's own user
    gid: int | None
    groups: tuple[int, ...]
    home: str
    shell: str


def build_step_plan(
    launch: Launch,
    *,
    node: str,
    job_dir: str,
    agent: str = "",
    unknown_users_as_agent: bool = False,
    denied_gpus: tuple[int, ...] = (),
    cpu_ids: tuple[int, ...] = (),
) -> StepPlan:
    run_as = resolve_user(launch, unknown_users_as_agent=unknown_users_as_agent)
    script_path = os.path.join(job_dir, SCRIPT_FILE)
    fields = filename_fields(launch, node)
    stdout, stderr = output_paths(
        launch.stdout,
        launch.stderr,
        launch.workdir,
        fields,
        array=launch.array_job_id is not None,
    )
    env = job_environment(
        launch,
        node,
        home=run_as.home,
        shell=run_as.shell,
        agent=agent,
        gpus_isolated=bool(denied_gpus),
    )
    return StepPlan(
        job_id=launch.job_id,
        attempt=launch.attempt,
        job_dir=job_dir,
        argv=(*script_argv(launch.script, script_path), *launch.script_args),
        env=env,
        workdir=launch.workdir,
        stdout_path=stdout,
        stderr_path=stderr,
        append=launch.open_mode == "append",
        memory_bytes=launch.memory_bytes,
        gpus=bool(launch.gpu_ids),
        uid=run_as.uid,
        gid=run_as.gid,
        groups=run_as.groups,
        umask=job_umask(env),
        denied_gpus=denied_gpus,
        cpu_ids=cpu_ids,
    )


def task_inputs(step: StepLaunch, node: str) -> tuple[str, ...]:
    """srun ``-i FILE``: each of ``step``'s ranks' stdin file on ``node``, in its ranks'
    order, the pattern expanded as Slurm's slurmstepd does (``%t`` the rank, ``%n`` the
    node's place in the job, ``%N`` the node, ``%s`` the step) from the tasks' working
    directory; () when the tasks read none."""
    if not step.input:
        return ()
    fields = replace(filename_fields(step.launch, node), step=step.step_id)
    return tuple(
        os.path.join(step.launch.workdir, expand_filename(step.input, replace(fields, task=rank)))
        for rank in step.ranks
    )


def filename_fields(launch: Launch, node: str) -> FilenameFields:
    """The job's file-name letters on ``node`` (a batch script's: no step, task 0)."""
    return FilenameFields(
        job_id=launch.job_id,
        name=launch.name,
        user=launch.user,
        node=node,
        node_index=launch.node_index,
        array_job_id=launch.array_job_id,
        array_task_id=launch.array_task_id,
    )


def job_umask(env: dict[str, str]) -> int | None:
    """The umask the job asks for in ``SLURM_UMASK`` (sbatch sends the submitter's, and
    slurmstepd applies it), or ``None`` to keep the agent's: also for a value that is no
    umask, which must not become a wide-open 000."""
    text = env.get("SLURM_UMASK")
    if text is None:
        return None
    try:
        return parse_umask(text)
    except InvalidRequest:
        return None


def script_argv(script: str, path: str) -> tuple[str, ...]:
    """How to run the spooled script: its ``#!`` line as the kernel reads it (interpreter
    plus at most one argument), else ``/bin/sh``.

    The agent runs the interpreter itself rather than exec'ing the script, so that a
    ``noexec`` state directory does not matter.
    """
    if script.startswith("#!"):
        line = script[2:].split("\n", 1)[0].strip()
        if line:
            parts = re.split(r"[ \t]+", line, maxsplit=1)
            if not parts[0].startswith("/"):
                raise LaunchError(f"the script's interpreter {parts[0]!r} is not an absolute path")
            return (*parts, path)
    return (DEFAULT_SHELL, path)


def resolve_user(launch: Launch, *, unknown_users_as_agent: bool = False) -> RunAs:
    """Run as ``launch.uid`` when the agent is root; otherwise as the agent's user.

    A launch without a uid is a user the control plane found no Unix account for. Run
    as a root agent's own user, that job would run as root, which Slurm never does for a
    user's job: refused, unless the agent was started with ``unknown_users_as_agent``
    (a cluster whose HAL users are not Unix users, e.g. a single-user test cluster)."""
    if os.geteuid() != 0 or launch.uid == os.geteuid():
        return _agent_user()
    if launch.uid is None:
        if unknown_users_as_agent:
            return _agent_user()
        raise LaunchError(
            f"user {launch.user!r} has no Unix account on the control plane's host, so "
            "this root agent would run the job as root; give the user an account there "
            "(the same uid as on the nodes), or start the agent with "
            "--unknown-users-as-agent if every job may run as the agent's user"
        )
    try:
        entry = pwd.getpwuid(launch.uid)
    except KeyError:
        entry = None
    gid = launch.gid if launch.gid is not None else (entry.pw_gid if entry else None)
    if gid is None:
        raise LaunchError(f"uid {launch.uid} has no passwd entry and the launch gave no gid")
    groups = tuple(os.getgrouplist(entry.pw_name, gid)) if entry else (gid,)
    return RunAs(
        uid=launch.uid,
        gid=gid,
        groups=groups,
        home=entry.pw_dir if entry else "",
        shell=entry.pw_shell if entry else "",
    )


@lru_cache(maxsize=1)
def _agent_user() -> RunAs:
    try:
        entry = pwd.getpwuid(os.geteuid())
        home, shell = entry.pw_dir, entry.pw_shell
    except KeyError:
        home, shell = "", ""
    return RunAs(uid=None, gid=None, groups=(), home=home, shell=shell)
