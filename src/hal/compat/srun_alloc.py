"""``srun`` outside a job: an allocation of its own, the command run as its step 0, and
the allocation given back when the step ends, as Slurm's srun does::

    $ srun -N2 -n4 hostname
    srun: job 12 queued and waiting for resources      (only when it has to wait)
    srun: job 12 has been allocated resources
    node1
    ...

The allocation is salloc's (``hal.compat.salloc``: a job whose batch script only holds
its nodes), asked for with the options of srun's command line that shape a job (``-N``,
``-n``, ``-c``, ``--mem``, ``-t``, ``-p``, ``-A``, ``-q``, ``-w``, ``-x``, ``-C``,
``--gres``, ``--exclusive``, ``-I``, ``--artifact`` ...) and named after the command
(``-J`` names both). The step is srun's as under salloc (``hal.compat.steps.run_step``):
its tasks on the allocation's nodes, their output relayed here, srun's signals passed on.
The job ends COMPLETED when the step exits 0, else FAILED with the step's exit code
(``128+N`` from the step reads as signal N), and srun exits with the step's code.
Ctrl-C while the job waits cancels it.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Mapping

from hal.compat.options import Arg, Opt, Parsed, parse_options
from hal.compat.salloc import Pending, await_allocation, granted_environment, relinquish
from hal.compat.salloc_options import OPTIONS as SALLOC_OPTIONS
from hal.compat.salloc_options import parse_salloc
from hal.compat.sbatch import process_umask
from hal.compat.seam import Console
from hal.compat.srun import OPTIONS, Invocation, env_values, with_multi_prog
from hal.compat.steps import run_step
from hal.core.errors import HalError

# salloc's that srun keeps to itself: its chatter
_SRUN_OWN = frozenset({"verbose", "quiet"})
_SALLOC_DESTS = frozenset(opt.dest for opt in SALLOC_OPTIONS) - _SRUN_OWN
_BY_DEST = {opt.dest: opt for opt in OPTIONS}


def allocation_argv(
    parsed: Parsed, call: Invocation, env: Mapping[str, str] | None = None
) -> list[str]:
    """salloc's command line for the allocation srun's options (``parsed``) and input
    variables (``env``: ``SLURM_SIGNAL``...) ask for: those that shape a job, spelled out
    in full, and ``-J`` the command's name by default."""
    out: list[str] = []
    given = {dest for dest, _, _ in parsed.values}
    inherited = [v for v in env_values(env or {}) if v[0] not in given]
    for dest, value, _ in (*inherited, *parsed.values):
        if dest in _SALLOC_DESTS:
            out += _spelled(_BY_DEST[dest], value)
    if not any(dest == "job_name" for dest, _, _ in parsed.values):
        out.append(f"--job-name={os.path.basename(call.command[0])}")
    return out


def _spelled(opt: Opt, value: str | None) -> list[str]:
    name = f"--{opt.long[0]}" if opt.long else f"-{opt.short}"
    if value is None:
        return [name]
    if opt.arg is Arg.OPTIONAL:  # (getopt: an optional value only glued to its option)
        return [f"{name}={value}" if opt.long else name + value]
    return [name, value]


def run_allocated(argv: list[str], call: Invocation, console: Console) -> int:
    """Allocate, run ``call`` as the allocation's step, give the allocation back; srun's
    exit code."""
    parsed = parse_options(argv, OPTIONS, stop_at_positional=True)  # (not the command's)
    quiet = any(dest == "quiet" for dest, _, _ in parsed.values)
    hostname = socket.gethostname()
    # srun reads no SALLOC_* input variable
    environ = {k: v for k, v in console.environ.items() if not k.startswith("SALLOC_")}
    try:
        request = parse_salloc(
            allocation_argv(parsed, call, console.environ),
            environ=environ,
            cwd=console.cwd,
            now=console.clock(),
            hostname=hostname,
            umask=process_umask(),
        )
    except HalError as err:
        return console.error(err.message)

    def info(line: str) -> None:
        if not quiet:
            console.err(f"srun: {line}")
            console.stderr.flush()

    for warning in request.warnings:
        info(warning)
    try:
        job_id = console.client.submit(request.job).job_id
    except HalError as err:
        return console.error(f"Unable to allocate resources: {err.message}")
    pending = Pending(job_id, info)
    pending.said = True  # (srun does not say "Pending job allocation", salloc does)
    granted = await_allocation(job_id, request, console, pending)
    if isinstance(granted, int):
        return granted
    try:
        env = granted_environment(console, granted, request, hostname)
        call = with_multi_prog(call, console, granted.ntasks or len(granted.nodes))
        code = run_step(job_id, call.within(len(granted.nodes)), call, console, environment=env)
    except HalError as err:
        code = console.error(err.message)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    relinquish(job_id, (code, 0) if code <= 128 else (0, code - 128), console)
    return code
