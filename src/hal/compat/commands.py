"""Entry point of the Slurm-compatible commands: ``run("squeue", ["-h", "-t", "all"])``.

``hal sbatch ...`` (``hal.cli.main``) and the installed ``sbatch``/``squeue``/... shims end
here. Everything a command touches outside itself comes in as an argument, so tests run
commands against a fake client and string buffers.
"""

from __future__ import annotations

import os
import sys
import time

from hal.compat.seam import Console
from hal.core.errors import HalError

TYPE_CHECKING = False  # (``typing`` is not imported at run time: see ``hal.compat.seam``)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TextIO

    from hal.client.sync import HalClient
    from hal.compat.seam import ClientFactory

# Each command's module is imported only when that command runs: a shim invocation pays
# for one command's imports, not sixteen (issue 51: sbatch and squeue start within 3× a
# bare interpreter's start).
COMMANDS: dict[str, str] = {
    "sbatch": "hal.compat.submit:sbatch",
    "squeue": "hal.compat.squeue:squeue",
    "scancel": "hal.compat.scancel:scancel",
    "sinfo": "hal.compat.sinfo:sinfo",
    "sacct": "hal.compat.sacct:sacct",
    "scontrol": "hal.compat.scontrol:scontrol",
    "srun": "hal.compat.srun:srun",
    "salloc": "hal.compat.salloc:salloc",
    "sprio": "hal.compat.sprio:sprio",
    "sshare": "hal.compat.sshare:sshare",
    "seff": "hal.compat.seff:seff",
    "sstat": "hal.compat.sstat:sstat",
    "sacctmgr": "hal.compat.sacctmgr:sacctmgr",
    "sdiag": "hal.compat.sdiag:sdiag",
    "scrontab": "hal.compat.scrontab:scrontab",
    "sbcast": "hal.compat.sbcast:sbcast",
}


def _handler(name: str) -> Callable[[list[str], Console], int] | None:
    target = COMMANDS.get(name)
    if target is None:
        return None
    module, func = target.split(":")
    __import__(module)  # (not importlib.import_module: the importlib package imports warnings)
    found: Callable[[list[str], Console], int] = getattr(sys.modules[module], func)
    return found


def _default_client(*args: Any, **kwargs: Any) -> HalClient:
    from hal.client.sync import HalClient

    return HalClient(*args, **kwargs)


def run(
    command: str,
    argv: list[str],
    *,
    client_factory: ClientFactory = _default_client,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: str | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run one Slurm command; returns its exit code. Streams default to the process's
    (looked up at call time), ``environ`` to ``os.environ``, ``cwd`` to the current
    directory."""
    name = os.path.basename(command)
    console = Console(
        command=name,
        client_factory=client_factory,
        stdout=stdout or sys.stdout,
        stderr=stderr or sys.stderr,
        stdin=stdin or sys.stdin,
        environ=dict(os.environ if environ is None else environ),
        cwd=cwd or os.getcwd(),
        clock=clock,
        sleep=sleep,
    )
    handler = _handler(name)
    if handler is None:
        return console.error(
            f"unknown command {name!r}; HAL provides {', '.join(sorted(COMMANDS))}"
        )
    try:
        return handler(list(argv), console)
    except HalError as err:  # a client error a command did not map itself
        return console.error(err.message)
    except KeyboardInterrupt:  # Ctrl-C in `squeue -i 5` or `sbatch --wait`: no traceback
        return 130
    finally:
        console.close()
