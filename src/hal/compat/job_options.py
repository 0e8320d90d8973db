"""Values of the job options sbatch, salloc and srun share and read the same way as
Slurm 22.05.8's ``slurm_opt.c``: ``-k``/``--no-kill[=off]``, ``--priority`` and
``--exclusive[=user]``. Each mistake starts with Slurm's own words (checked against the
peer, docs/slurm-checks.md, "Job options")."""

from __future__ import annotations

from hal.core.errors import InvalidRequest, UnsupportedOption

# --priority=TOP: Slurm's highest priority a job may be given (NO_VAL - 2)
TOP_PRIORITY = 4294967293
_LEADING_INT = r"^\s*([+-]?\d+)"


def no_kill(value: str | None) -> bool:
    """``-k``/``--no-kill`` (no value, or any but ``off``/``no``) is on; ``=off`` (also
    ``=no``, any case) turns off what ``SBATCH_NO_KILL`` set; anything else is refused,
    as Slurm's sbatch refuses ``--no-kill=yes`` and ``SBATCH_NO_KILL=1``."""
    if value is None:
        return True
    word = value.strip().lower()
    if word in ("off", "no"):
        return False
    raise InvalidRequest(
        f"Invalid --no-kill specification: {value!r}; write -k (or --no-kill) to keep the "
        "job when a node fails, or --no-kill=off to turn off SBATCH_NO_KILL (SALLOC_NO_KILL, "
        "SLURM_NO_KILL)",
        field="no-kill",
    )


def priority(value: str) -> int | None:
    """``--priority=N``: the number at the start of ``value`` (``TOP``: the highest),
    read as Slurm's ``strtoll``: ``abc`` and ``0`` ask nothing (None), as in Slurm
    22.05.8; a negative or too large one is refused with Slurm's words."""
    if value.strip().upper() == "TOP":
        return TOP_PRIORITY
    import re  # (a rare option's: sbatch's start-up has no re, see hal.slurm.syntax)

    match = re.match(_LEADING_INT, value)
    number = int(match.group(1)) if match else 0
    if number < 0:
        raise InvalidRequest(
            f"Priority must be >= 0 (--priority={value.strip()})", field="priority"
        )
    if number > TOP_PRIORITY:
        raise InvalidRequest(
            f"Priority must be < {TOP_PRIORITY + 1} (--priority={value.strip()}; TOP is "
            "the highest)",
            field="priority",
        )
    return number or None


class Sharing:
    """What ``--exclusive[=MODE]`` asks: whole nodes (``exclusive``), nodes shared only
    with the same user's jobs (``user``), or nothing (``=oversubscribe``). (A plain
    class: sbatch imports this module at start-up, see ``hal.compat``.)"""

    __slots__ = ("exclusive", "user")

    def __init__(self, exclusive: bool = False, user: bool = False) -> None:
        self.exclusive = exclusive
        self.user = user


def exclusive(value: str | None) -> Sharing:
    """``--exclusive`` (or ``=exclusive``): whole nodes; ``=user``: nodes shared only
    with the submitting user's jobs (Slurm's ``OverSubscribe=USER``);
    ``=oversubscribe``: the default, shared. ``=mcs`` needs MCS labels, which HAL has
    not; any other word is refused with Slurm's "Invalid --exclusive specification"."""
    word = "exclusive" if value is None else value.strip().lower()
    if word == "exclusive":
        return Sharing(exclusive=True)
    if word == "user":
        return Sharing(user=True)
    if word == "oversubscribe":
        return Sharing()
    if word == "mcs":
        raise UnsupportedOption(
            "--exclusive=mcs shares nodes by MCS label, and HAL has no MCS labels; use "
            "--exclusive=user (nodes shared only with your own jobs) or --exclusive",
            field="exclusive",
        )
    raise InvalidRequest(
        f"Invalid --exclusive specification: {value!r}; write --exclusive (whole nodes) "
        "or --exclusive=user (nodes shared only with your own jobs)",
        field="exclusive",
    )
