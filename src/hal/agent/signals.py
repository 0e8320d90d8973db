"""Signal names and ``--signal=[B:]SIG[@secs]`` specs as they arrive in a ``Launch``."""

from __future__ import annotations

import signal

from hal.core.errors import InvalidRequest
from hal.core.job import SignalSpec

DEFAULT_SECONDS_BEFORE = 60  # Slurm's default when "@secs" is absent


def signal_number(text: str) -> int:
    """``"USR1"``, ``"SIGUSR1"``, ``"usr1"`` or ``"10"`` → 10."""
    name = text.strip().upper()
    if name.isdigit():
        number = int(name)
        if number not in {int(s) for s in signal.valid_signals()}:
            raise InvalidRequest(f"unknown signal number {number}", field="signal")
        return number
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise InvalidRequest(
            f"unknown signal {text!r}; use a name such as USR1 or a number", field="signal"
        ) from None


def parse_signal_spec(text: str) -> SignalSpec:
    """Parse Slurm's ``[{R|B}:]SIG[@secs]``.

    ``B:`` sends the signal to the batch shell only; ``R:`` (reservation end) has no
    meaning on a node and is accepted and ignored, as sbatch accepts it.
    """
    rest = text.strip()
    batch_only = False
    flags, sep, tail = rest.partition(":")
    if sep and flags and set(flags.upper()) <= {"B", "R"}:
        batch_only = "B" in flags.upper()
        rest = tail
    sig, at, secs = rest.partition("@")
    seconds = DEFAULT_SECONDS_BEFORE
    if at:
        if not secs.strip().isdigit():
            raise InvalidRequest(f"bad --signal time in {text!r}", field="signal")
        seconds = int(secs)
    return SignalSpec(signum=signal_number(sig), seconds_before=seconds, batch_only=batch_only)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
