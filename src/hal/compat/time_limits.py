"""A job's or step's time limit as Slurm's commands take it: in whole minutes.

Slurm 22.05.8 keeps every time limit in minutes and rounds seconds up (``sbatch -t 5:30``
is ``TimeLimit=00:06:00``, ``srun -t 0:10`` a step's ``00:01:00``), so ``sbatch -t``,
``--time-min``, ``salloc -t``, ``srun -t`` and ``scontrol update TimeLimit=``/``TimeMin=``
round here, before anything is sent. HAL's own API (``time_limit_seconds``) keeps seconds.

``HAL_EXACT_TIME_LIMITS=1`` in the command's environment keeps the seconds instead: HAL's
timers are finer than Slurm's, and a test that waits for a limit to pass need not wait a
minute (HAL's live test servers set it; a batch job's ``srun`` inherits it).
"""

from __future__ import annotations

from hal.slurm.syntax import parse_time_limit, whole_minutes

TYPE_CHECKING = False  # (sbatch's start-up: see ``hal.compat``)
if TYPE_CHECKING:
    from collections.abc import Mapping

EXACT_SECONDS_VARIABLE = "HAL_EXACT_TIME_LIMITS"


def command_time_limit(
    text: str, environ: Mapping[str, str], *, field: str = "time", unlimited: bool = True
) -> int:
    """``text`` in seconds (0: no limit), whole minutes unless ``environ`` asks for the
    seconds; ``field`` and ``unlimited`` as ``parse_time_limit`` takes them."""
    seconds = parse_time_limit(text, field=field, unlimited=unlimited)
    if environ.get(EXACT_SECONDS_VARIABLE, "").strip() == "1":
        return seconds
    return whole_minutes(seconds)
