"""``salloc`` argument parsing, the job that holds the allocation, and the environment its
command runs with.

``salloc [options] [command [args...]]``: sbatch's resource and scheduling options
(``-N``, ``-n``, ``-c``, ``--mem``, ``-t``, ``-p``, ``--gres``/``--gpus``, ``-J``, ``-A``,
``-q``, ``-w``/``-x``, ``-C``, ``--begin``, ``-d``, ``-H``...), checked and built by
``hal.compat.sbatch``, over Slurm's ``SALLOC_*`` input variables; the first word that
is no option starts the command (default: ``$SHELL``, else ``/bin/sh``; none with
``--no-shell``), and ``-K``, ``-I`` and ``--no-shell`` are salloc's own. Options only
a batch job has (``-o``, ``-e``, ``--array``, ``--wrap``, ``--parsable``, ``--wait``,
``--test-only``, ``--requeue``, ``--export``) are refused, as salloc has none of them.

The allocation is an ordinary job whose batch script (``HOLD_SCRIPT``) only waits, on
the allocation's first node, while the command runs here; salloc ends it when the
command exits (``hal.compat.salloc``).
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from hal.compat.names import SALLOC_JOB_VARIABLE
from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.sbatch import OPTIONS as SBATCH_OPTIONS
from hal.compat.sbatch import BatchScript, Setting, job_from_options
from hal.core.errors import InvalidRequest, UnsupportedOption
from hal.core.resources import MiB
from hal.slurm.job_variables import describes_a_job
from hal.slurm.steps import tasks_per_node
from hal.slurm.syntax import compress_hostlist, parse_signal, parse_signal_name
from hal.wire.submit import JobSubmit

# what only a batch job has: salloc.1 lists none of these
_BATCH_ONLY = frozenset(
    {
        "output",
        "error",
        "array",
        "wrap",
        "parsable",
        "wait",
        "test_only",
        "requeue",
        "no_requeue",
        "export",
        "kill_on_invalid_dep",
    }
)
OPTIONS: tuple[Opt, ...] = (
    *(opt for opt in SBATCH_OPTIONS if opt.dest not in _BATCH_ONLY),
    Opt("kill_command", ("kill-command",), "K", Arg.OPTIONAL),
    Opt("immediate", ("immediate",), "I", Arg.OPTIONAL),
    Opt("no_shell", ("no-shell",), arg=Arg.NONE),
)

# salloc.1, INPUT ENVIRONMENT VARIABLES (those of options HAL takes)
ENV_OPTIONS = {
    "SALLOC_ACCOUNT": "account",
    "SALLOC_CONSTRAINT": "constraint",
    "SALLOC_EXCLUSIVE": "exclusive",
    "SALLOC_GPUS": "gpus",
    "SALLOC_GPUS_PER_NODE": "gpus_per_node",
    "SALLOC_GPUS_PER_TASK": "gpus_per_task",
    "SALLOC_GRES": "gres",
    "SALLOC_IMMEDIATE": "immediate",
    "SALLOC_KILL_CMD": "kill_command",
    "SALLOC_MEM_PER_CPU": "mem_per_cpu",
    "SALLOC_MEM_PER_GPU": "mem_per_gpu",
    "SALLOC_MEM_PER_NODE": "mem",
    "SALLOC_NO_KILL": "no_kill",
    "SALLOC_PARTITION": "partition",
    "SALLOC_QOS": "qos",
    "SALLOC_REQ_SWITCH": "switches",
    "SALLOC_RESERVATION": "reservation",
    "SALLOC_SIGNAL": "signal",
    "SALLOC_TIMELIMIT": "time",
}

# The allocation's batch script: it holds the nodes until salloc ends it. salloc sends
# the batch shell SIGWINCH when its command succeeded and SIGURG when it failed, so the
# job ends COMPLETED or FAILED (with the command's exit status, which salloc records
# first: hal.state.command_exit; exit code 1 on a server that keeps none); both signals are
# ignored by default, so one that comes before the traps are set does no harm (salloc
# sends it again). Cancelling the job (scancel, the time limit) kills it as any job.
HOLD_SCRIPT = """\
#!/bin/sh
# HAL salloc: this job holds its allocation while salloc's command runs on the host
# salloc was started on; salloc ends it when the command exits.
trap 'kill $! 2>/dev/null; exit 0' WINCH
trap 'kill $! 2>/dev/null; exit 1' URG
sleep 2147483647 &
wait $!
"""
DEFAULT_NAME = "interactive"


@dataclass(frozen=True, slots=True)
class SallocRequest:
    """What salloc should do: get ``job``'s allocation, then run ``command``."""

    job: JobSubmit
    command: tuple[str, ...] = ()
    # -K: the signal for the command when the allocation is revoked; None: SIGHUP for an
    # interactive command (stdin a terminal), SIGTERM otherwise, as salloc.1 says
    kill_signal: int | None = None
    # -I: give up unless granted within this many seconds (0: once the scheduler has
    # looked at it); None: wait as long as it takes
    immediate: float | None = None
    no_shell: bool = False  # --no-shell: exit once granted, the allocation left running
    quiet: bool = False
    verbose: int = 0
    help: bool = False
    version: bool = False
    # what salloc says on stderr (not with -Q) about a request it changed before sending
    # it: sbatch's warnings (``SbatchRequest.warnings``), salloc's words the same
    warnings: tuple[str, ...] = ()


def parse_salloc(
    argv: list[str],
    *,
    environ: Mapping[str, str],
    cwd: str,
    now: float,
    hostname: str = "",
    umask: int | None = None,
) -> SallocRequest:
    """Raises ``InvalidRequest`` (``UnsupportedOption`` for an option HAL's salloc lacks)
    with the line for ``salloc: error:``."""
    try:
        parsed = parse_options(argv, OPTIONS, stop_at_positional=True)
    except OptionError as err:
        if err.unknown:
            raise UnsupportedOption(
                f"{err.message}: HAL's salloc does not support it; see salloc --help for "
                "the options it accepts",
                field=err.option.lstrip("-"),
            ) from None
        raise InvalidRequest(err.message, field=err.option.lstrip("-")) from None
    given = {dest for dest, _, _ in parsed.values}
    if given & {"help", "usage"}:
        return SallocRequest(JobSubmit(script=""), help=True)
    if "version" in given:
        return SallocRequest(JobSubmit(script=""), version=True)
    env_settings: dict[str, Setting] = {
        dest: (environ[var], var) for var, dest in ENV_OPTIONS.items() if environ.get(var)
    }
    for value, _ in [env_settings.get("signal", (None, ""))] + [
        (v, s) for d, v, s in parsed.values if d == "signal"
    ]:
        if value is not None:
            parse_signal(value, batch=False)  # (salloc has no batch shell: no B:)
    kill: Setting | None = env_settings.pop("kill_command", None)
    immediate: Setting | None = env_settings.pop("immediate", None)
    for dest, value, spelled in parsed.values:
        if dest == "kill_command":
            kill = (value, spelled)
        elif dest == "immediate":
            immediate = (value, spelled)
    no_shell = "no_shell" in given
    if no_shell and parsed.positionals:
        raise InvalidRequest(
            f"--no-shell runs no command, yet {parsed.positionals[0]!r} was given: drop "
            f"the command, then run it with srun --jobid=<the job id>",
            field="no-shell",
        )
    command = tuple(parsed.positionals) or (environ.get("SHELL") or "/bin/sh",)
    # -J, else "interactive" whatever the command: salloc.1 says the command's name, but
    # Slurm 22.05.8 names `salloc hostname` "interactive" too, and `salloc --no-shell`
    # "no-shell" (docs/slurm-checks.md)
    warnings: list[str] = []
    job = job_from_options(
        parsed,
        env_settings,
        BatchScript(HOLD_SCRIPT, "no-shell" if no_shell else DEFAULT_NAME),
        environ=environ,
        cwd=cwd,
        now=now,
        hostname=hostname,
        umask=umask,
        warnings=warnings,
    )
    # nothing to keep from the holding script; BatchFlag=0 in scontrol show job, and
    # Requeue=1 (the cluster's default, Slurm's JobRequeue=1), as Slurm 22.05.8 shows
    # them; a node failure still ends it NODE_FAIL (Cluster.finish): as in Slurm, only a
    # batch job is requeued, an allocation's command has gone by then
    job = dataclasses.replace(job, stdout="/dev/null", requeue=True, interactive=True)
    return SallocRequest(
        job=job,
        command=command,
        kill_signal=_kill_signal(kill),
        immediate=_immediate(immediate),
        no_shell=no_shell,
        quiet="quiet" in given,
        verbose=sum(dest == "verbose" for dest, _, _ in parsed.values),
        warnings=tuple(warnings),
    )


def _kill_signal(setting: Setting | None) -> int | None:
    if setting is None:
        return None
    value, spelled = setting
    if not value:
        return None
    try:
        return parse_signal_name(value, field="kill-command")
    except InvalidRequest:
        raise InvalidRequest(
            f"{spelled}: unknown signal {value!r}; give a signal name or number, e.g. "
            "--kill-command=TERM",
            field="kill-command",
        ) from None


def _immediate(setting: Setting | None) -> float | None:
    """``-I``'s seconds: no value (or 0) means at once."""
    if setting is None:
        return None
    value, spelled = setting
    if not value:
        return 0.0
    if not value.strip().isdigit():
        raise InvalidRequest(
            f"{spelled}: {value!r} is no number of seconds; write e.g. --immediate=30, "
            "or -I alone for at once",
            field="immediate",
        )
    return float(int(value))


def default_kill_signal(interactive: bool) -> int:
    return signal.SIGHUP if interactive else signal.SIGTERM


@dataclass(frozen=True, slots=True)
class Granted:
    """The allocation as salloc learned it once the job runs."""

    job_id: int
    name: str
    nodes: tuple[str, ...]
    partition: str
    cpus: int  # over all nodes
    ntasks: int
    account: str | None = None
    qos: str | None = None


def allocation_environment(
    environ: Mapping[str, str],
    granted: Granted,
    job: JobSubmit,
    *,
    cluster_name: str,
    submit_dir: str,
    hostname: str,
) -> dict[str, str]:
    """The command's environment: salloc's own, less what describes another job (salloc
    run inside one), plus the variables Slurm's salloc sets (salloc.1, OUTPUT
    ENVIRONMENT VARIABLES) and ``SALLOC_JOB_VARIABLE``. ``SLURM_NTASKS``,
    ``SLURM_CPUS_PER_TASK`` and ``SLURM_MEM_PER_*`` only where their option was given."""
    env = {k: v for k, v in environ.items() if not describes_a_job(k)}
    count = len(granted.nodes)
    nodelist = compress_hostlist(list(granted.nodes))
    values = {
        "SLURM_JOB_ID": str(granted.job_id),
        "SLURM_JOBID": str(granted.job_id),
        "SLURM_JOB_NAME": granted.name,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(count),
        "SLURM_NNODES": str(count),
        "SLURM_JOB_PARTITION": granted.partition,
        "SLURM_JOB_CPUS_PER_NODE": tasks_per_node(granted.cpus, None, count),
        "SLURM_TASKS_PER_NODE": tasks_per_node(granted.ntasks, job.ntasks_per_node, count),
        "SLURM_SUBMIT_DIR": submit_dir,
        "SLURM_SUBMIT_HOST": hostname,
        "SLURM_CLUSTER_NAME": cluster_name,
        "HAL_JOB_ID": str(granted.job_id),
        "HAL_JOB_NAME": granted.name,
        "HAL_JOB_NODELIST": nodelist,
        SALLOC_JOB_VARIABLE: str(granted.job_id),
    }
    if job.ntasks is not None:
        values["SLURM_NTASKS"] = values["SLURM_NPROCS"] = str(job.ntasks)
    if job.ntasks_per_node:
        values["SLURM_NTASKS_PER_NODE"] = str(job.ntasks_per_node)
    if job.cpus_per_task != 1:
        values["SLURM_CPUS_PER_TASK"] = str(job.cpus_per_task)
    for name, size in (
        ("SLURM_MEM_PER_NODE", job.memory_per_node_bytes),
        ("SLURM_MEM_PER_CPU", job.memory_per_cpu_bytes),
        ("SLURM_MEM_PER_GPU", job.memory_per_gpu_bytes),
    ):
        if size:
            values[name] = str(size // MiB)
    if granted.account:
        values["SLURM_JOB_ACCOUNT"] = granted.account
    if granted.qos:
        values["SLURM_JOB_QOS"] = granted.qos
    env.update(values)
    return env


HELP = """\
Usage: salloc [OPTIONS...] [command [args...]]   (HAL's Slurm-compatible salloc)

Gets an allocation, runs the command here (default: $SHELL) with SLURM_JOB_ID,
SLURM_JOB_NODELIST, ... set, and gives the allocation back when it exits; srun in the
command runs job steps on the allocation's nodes. With --no-shell it runs nothing and
leaves the allocation for `srun --jobid=N ...` from any shell.

Options HAL accepts (anything else is refused with an error):
  -J, --job-name=name        -p, --partition=list      -N, --nodes=min[-max]
  -n, --ntasks=N             --ntasks-per-node=N       -c, --cpus-per-task=N
      --mem=size  --mem-per-cpu=size  --mem-per-gpu=size
      --gres=gpu[:type]:N    -G, --gpus=[type:]N       --gpus-per-node=[type:]N
      --gpus-per-task=[type:]N  -t, --time=limit       --time-min=limit
  -d, --dependency=list      -A, --account=name        -q, --qos=name
  -D, --chdir=dir            -C, --constraint=a&b      -x, --exclude=hosts
  -w, --nodelist=hosts       -H, --hold                -b, --begin=time
      --signal=[R:]sig[@secs]  signal the allocation's steps secs (default 60)
                             before its time limit
      --exclusive[=user]     whole nodes; =user: nodes shared only with your own jobs
  -k, --no-kill[=off]        taken; HAL still ends the job when one of its nodes fails
      --priority=N|TOP       the job's priority (administrators; others' is ignored)
      --comment=text  --nice[=adj]
      --switches=N[@max-wait]  --topology=required=LEVEL|preferred=LEVEL
      --data=key[,key...]    --reservation=name        -L, --licenses=list
      --artifact=name[@version][,...]  published software on the nodes (HAL)
      --python-env=lockfile|name@version  its steps run with this Python environment
                             (a lock built on each node, or a conda-pack artifact; HAL)
      --container=name@version|/bundle  its steps run in this image or bundle (HAL)
      --near=rule[,rule...]  near jobs: [preferred=]job:ID|name:NAME[@LEVEL] (HAL)
      --apart=rule[,rule...] away from them, the same rules (HAL)
      --latency-sensitive    keep noisy neighbours away from the job first (HAL)
  -K, --kill-command[=signal]  the signal for the command when the allocation is
                             revoked (default: SIGHUP, or SIGTERM without a terminal)
  -I, --immediate[=secs]     give up (exit 1) unless granted within secs (alone: at
                             the scheduler's first look at the request)
      --no-shell             exit once granted, leaving the allocation running until
                             its time limit or scancel; run steps with srun --jobid=N
      --mail-type=type  --mail-user=user   job mail, as sbatch (docs/user/mail.md)
  -Q, --quiet  -v, --verbose  -h, --help  -V, --version
"""
