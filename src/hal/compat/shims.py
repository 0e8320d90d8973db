"""``sbatch``/``squeue``/... executables that run HAL's commands, for tools that call the
Slurm names (``hal compat install-shims DIR``).

A shim never shadows a real Slurm installation by accident: if a command of the same name
already exists in the target directory or anywhere on ``PATH`` and is not one of our
shims, installation refuses (naming the file) unless ``force=True``. ``srun`` is the
in-job ``hal.compat.srun`` (job steps across the job's nodes; it refuses outside a job
or an allocation), ``salloc`` is ``hal.compat.salloc`` (an allocation for a command run
here).
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

from hal.compat.names import SLURM_COMMANDS
from hal.core.errors import Conflict

SHIM_COMMANDS = SLURM_COMMANDS
MARKER = "# hal-slurm-shim"  # identifies files we wrote, so reinstalling may replace them


# What a shim runs: ``hal``'s entry point imported, not run with ``-m`` (runpy and the
# importlib machinery it loads are start-up time, which a workflow tool pays per job).
ENTRY = "import sys; from hal.cli.main import main; sys.exit(main())"


def shim_text(command: str, python: str | None = None) -> str:
    interpreter = shlex.quote(python or sys.executable)
    return (
        "#!/bin/sh\n"
        f"{MARKER}: runs HAL's Slurm-compatible {command}; delete this file to remove it.\n"
        f'exec {interpreter} -c {shlex.quote(ENTRY)} {command} "$@"\n'
    )


def is_shim(path: Path) -> bool:
    try:
        with path.open("r", errors="replace") as f:
            return MARKER in f.read(512)
    except OSError:
        return False


def find_real_commands(target_dir: Path, path_env: str | None = None) -> list[Path]:
    """Existing non-shim executables named like the shims, in ``target_dir`` or on PATH."""
    found: list[Path] = []
    directories = [target_dir] + [
        Path(d)
        for d in (path_env if path_env is not None else os.environ.get("PATH", "")).split(
            os.pathsep
        )
        if d
    ]
    seen: set[Path] = set()
    for directory in directories:
        for command in SHIM_COMMANDS:
            candidate = directory / command
            key = candidate.resolve() if candidate.exists() else candidate
            if key in seen:
                continue
            seen.add(key)
            if candidate.is_file() and os.access(candidate, os.X_OK) and not is_shim(candidate):
                found.append(candidate)
            elif candidate.exists() and directory == target_dir and not is_shim(candidate):
                found.append(candidate)  # a non-executable file we would overwrite
    return found


def install_shims(
    target_dir: Path | str,
    *,
    force: bool = False,
    path_env: str | None = None,
    python: str | None = None,
) -> list[Path]:
    """Write the shims into ``target_dir`` (created if needed); returns their paths. They
    run ``python`` (default: this interpreter).

    Raises ``Conflict`` naming the real Slurm commands found, unless ``force``. Nothing is
    written when it refuses."""
    target = Path(target_dir)
    if not force:
        real = find_real_commands(target, path_env)
        if real:
            listing = ", ".join(str(p) for p in real)
            raise Conflict(
                f"refusing to install Slurm shims: real Slurm commands exist ({listing}). "
                "The shims would shadow them or be shadowed by them. Use HAL's own commands "
                "(`hal sbatch ...`), install into a directory used only where Slurm is "
                "absent, or pass --force to install anyway (files there are overwritten)"
            )
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for command in SHIM_COMMANDS:
        path = target / command
        tmp = path.with_name(f".{command}.tmp")
        tmp.write_text(shim_text(command, python))
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(path)
        written.append(path)
    return written
