"""SIGTERM inside a session's ``with`` block cancels the session, as Ctrl-C does.

``kill PID`` (a supervisor stopping the client, a batch job reaching its end) used to end
the client by the signal's default action: its session lost its client without a word,
and its workers held their CPUs for the broker's grace (300 s) before it ended LOST.
While a ``with`` block runs in the main thread and SIGTERM has its default action, a
handler raises ``Terminated`` (a ``SystemExit`` with status 143, what a shell reports
for a process SIGTERM ended) where the program is, so the block is left through an
exception and cancels its session (or detaches one meant to survive its client).

A handler the program installed (or ``SIG_IGN``) is left alone; a block in another
thread installs nothing (Python sets and runs handlers in the main thread only); and the
first SIGTERM puts the default action back, so a second one ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class Terminated(SystemExit):
    """SIGTERM reached the process while a session's ``with`` block ran."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Terminated


def install() -> bool:
    """Handle SIGTERM from here on, where it is ours to handle; returns whether it was
    (then ``uninstall`` when the block ends)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False  # the program's own handler, SIG_IGN, or an outer block's
    signal.signal(signal.SIGTERM, _terminate)
    return True


def uninstall() -> None:
    """The default action again, unless the program has set a handler since."""
    if signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def exception_name(exc_type: type[BaseException]) -> str:
    """How a session's reason names what left its block."""
    return "SIGTERM" if issubclass(exc_type, Terminated) else exc_type.__name__
