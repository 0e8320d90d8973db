"""`--signal=[B:]SIG[@secs]` as Slurm accepts it (Nextflow sends B:USR2@30)."""

from __future__ import annotations

import signal

import pytest

from hal.agent.signals import parse_signal_spec, signal_number
from hal.core.errors import InvalidRequest
from hal.core.job import SignalSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("B:USR2@30", SignalSpec(signal.SIGUSR2, 30, True)),
        ("USR1", SignalSpec(signal.SIGUSR1, 60, False)),
        ("SIGTERM@5", SignalSpec(signal.SIGTERM, 5, False)),
        ("10@1", SignalSpec(10, 1, False)),
        ("R:INT@9", SignalSpec(signal.SIGINT, 9, False)),
        ("RB:usr1", SignalSpec(signal.SIGUSR1, 60, True)),
    ],
)
def test_parse(text: str, expected: SignalSpec) -> None:
    assert parse_signal_spec(text) == expected


@pytest.mark.parametrize("text", ["B:NOPE", "USR1@soon", "999", ""])
def test_rejects(text: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_signal_spec(text)


def test_signal_number_accepts_names_and_numbers() -> None:
    assert signal_number("sigkill") == signal_number("KILL") == signal_number("9") == 9
