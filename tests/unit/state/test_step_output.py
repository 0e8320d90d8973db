"""A step's output on the server (``hal.state.steps.Step``): each byte taken once
whatever the agent resends, read by cursor, and bounded while srun does not read."""

from __future__ import annotations

import pytest

from hal.slurm.steps import StepLayout
from hal.state import steps
from hal.state.steps import Step


def fresh() -> Step:
    return Step(12, 0, 0, "hostname", StepLayout(("a1", "a2"), (1, 1)), start_time=0.0)


def test_resent_and_overlapping_bytes_are_taken_once() -> None:
    """Two syncs may carry the same bytes (the long poll and a flush): srun sees them
    once, in order."""
    step = fresh()
    step.take(0, "stdout", 0, b"hello ")
    step.take(0, "stdout", 0, b"hello ")  # the same again
    step.take(0, "stdout", 3, b"lo world")  # overlaps what came
    step.take(1, "stderr", 0, b"x")
    step.take(0, "stdout", 50, b"gap")  # cannot happen; must not be glued on
    chunks = step.read(0)
    assert [(r, s, d) for _, r, s, d in chunks] == [
        (0, "stdout", b"hello "),
        (0, "stdout", b"world"),
        (1, "stderr", b"x"),
    ]
    assert step.read(chunks[1][0]) == chunks[2:]  # read up to a cursor: those go
    assert step.buffered == 1


def test_unread_output_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "MAX_BUFFERED_BYTES", 10)
    step = fresh()
    for i in range(5):
        step.take(0, "stdout", 4 * i, b"abcd")
    assert step.buffered <= 10 and step.dropped == 12
    assert b"".join(d for *_, d in step.read(0)) == b"abcd" * 2


def test_a_page_holds_about_a_mebibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "PAGE_BYTES", 8)
    step = fresh()
    for i in range(3):
        step.take(0, "stdout", 5 * i, b"abcde")
    first = step.read(0)
    assert len(first) == 1  # a second chunk would pass 8 bytes
    assert len(step.read(first[-1][0])) == 1 and step.buffered == 10
