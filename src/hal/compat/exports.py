"""``--export``: which of the caller's environment variables a job or a step gets.

sbatch and srun read the same words differently. Slurm 22.05.8 was checked side by side
(docs/slurm-checks.md):

- **sbatch** (``export_environment``): ``ALL`` sends the submitter's whole environment,
  ``NONE`` only its ``SLURM_*`` variables, and ``[ALL|NONE,]NAME[=value],...`` the
  ``SLURM_*`` variables (all of them with ``ALL``) plus those listed. A listed value wins
  over the submitter's. sbatch also puts the words given in the job's
  ``SLURM_EXPORT_ENV``. ``HAL_*`` variables go with the ``SLURM_*`` ones: ``HAL_URL``
  and ``HAL_TOKEN`` are how the job's own ``srun`` and ``scontrol`` reach the control
  plane, where Slurm's read ``slurm.conf`` (without them a ``--export=NONE`` job's
  srun could not record its steps, and its steps on other nodes could not start).
- **srun** (``step_environment``), with ``--export`` or, without it, ``SLURM_EXPORT_ENV``
  (so every step of an ``sbatch --export=NONE`` job gets ``NONE``, Slurm's known trap):
  - ``ALL,NAME=value`` adds the names srun's environment lacks and leaves the ones it
    has; srun's own values win, as its man page says.
  - ``NONE`` (in any case) keeps only ``SLURM*`` variables and ignores names listed with
    it.
  - ``NAME[=value],...`` keeps ``SLURM*`` plus those listed. An empty value is the same
    with no names.

  HAL's ``HAL_*`` variables count as ``SLURM*`` ones: they carry the address of the
  control plane, so ``srun`` and ``scontrol`` still work inside the tasks.
  ``TMPDIR`` stays, as slurmstepd sets it. Slurm gives such tasks no ``PATH``, so a
  command without a ``/`` fails there. HAL gives them the agent's login-like minimum, the
  one ``sbatch --export=NONE`` jobs get: ``PATH=/usr/local/bin:/usr/bin:/bin`` plus the
  caller's ``USER``, ``LOGNAME``, ``HOME`` and ``SHELL``. A command without a ``/`` then
  still runs, and nothing else of the batch script's environment reaches the tasks.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (sbatch's start-up: see ``hal.compat``)
if TYPE_CHECKING:
    from collections.abc import Mapping

EXPORT_VARIABLE = "SLURM_EXPORT_ENV"  # sbatch's --export, srun's default --export
_NAME_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_NAME_CHARS = _NAME_START | frozenset("0123456789")
_KEPT_PREFIXES = ("SLURM", "HAL_")
_KEPT = ("TMPDIR", "USER", "LOGNAME", "HOME", "SHELL")


def export_items(spec: str) -> list[str]:
    """The comma-separated words of ``spec``. A comma inside a value is kept when the next
    piece is not a ``NAME`` or ``NAME=``."""
    items: list[str] = []
    for piece in spec.split(","):
        if items and not _names_a_variable(piece):
            items[-1] += "," + piece
        elif piece:
            items.append(piece)
    return items


def _names_a_variable(piece: str) -> bool:
    """``re.match(r"^[A-Za-z_][A-Za-z0-9_]*(=|$)", piece)``: ``NAME=...`` or ``NAME``
    (with one final newline, as ``$`` allows)."""
    name, eq, _ = piece.partition("=")
    name = name if eq else name.removesuffix("\n")
    return name[:1] in _NAME_START and _NAME_CHARS.issuperset(name)


def _listed(items: list[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``items`` name: a value given, else the caller's (if it has one)."""
    out: dict[str, str] = {}
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, val = item.partition("=")
        if eq:
            out[name] = val
        elif name in environ:
            out[name] = environ[name]
    return out


def export_environment(spec: str, environ: Mapping[str, str]) -> dict[str, str]:
    """sbatch's ``--export``: what the job's environment starts from."""
    items = export_items(spec)
    upper = [item.upper() for item in items]
    if "ALL" in upper:
        env = dict(environ)
    else:  # (NONE,NAME=value: the names alone, as Slurm 22.05.8's sbatch runs it)
        env = {k: v for k, v in environ.items() if k.startswith(("SLURM_", "HAL_"))}
    env.update(_listed(items, environ))
    return env


def exports_all(spec: str) -> bool:
    """Whether srun's ``--export=spec`` keeps srun's whole environment."""
    return "ALL" in (item.upper() for item in export_items(spec))


def step_environment(spec: str, environ: Mapping[str, str]) -> dict[str, str]:
    """srun's ``--export``: the tasks' environment from srun's ``environ``."""
    items = export_items(spec)
    listed = _listed(items, environ)
    if exports_all(spec):
        return {**listed, **environ}
    env = {k: v for k, v in environ.items() if k.startswith(_KEPT_PREFIXES) or k in _KEPT}
    from hal.slurm.job_variables import DEFAULT_PATH  # (srun's: not sbatch's start-up)

    env["PATH"] = DEFAULT_PATH
    if "NONE" not in (item.upper() for item in items):
        env.update(listed)
    return env
