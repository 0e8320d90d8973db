"""CycleState's typed keys and clone; Status helpers."""

from __future__ import annotations

import pytest

from hal.core.states import PendingReason
from hal.scheduler.framework import Code, CycleState, StateKey, Status
from hal.scheduler.framework.status import SKIP, SUCCESS, error, unschedulable

COUNT: StateKey[int] = StateKey("test.count")
ITEMS: StateKey[list[int]] = StateKey("test.items")


class Box:
    def __init__(self, value: int) -> None:
        self.value = value

    def clone(self) -> Box:
        return Box(self.value)


BOX: StateKey[Box] = StateKey("test.box")


def test_typed_keys_round_trip() -> None:
    """What a PreFilter writes its Filter reads back, by key identity."""
    state = CycleState()
    state.write(COUNT, 3)
    assert state.read(COUNT) == 3
    assert COUNT in state
    assert state.get(ITEMS) is None
    assert StateKey[int]("test.count") not in state  # same name, different key


def test_missing_key_names_it() -> None:
    """Reading a key nobody wrote is a wiring bug and says which key."""
    with pytest.raises(KeyError, match=r"test\.items"):
        CycleState().read(ITEMS)


def test_clone_is_independent_and_deep_for_clonables() -> None:
    """A what-if copy: writes to the clone and clonable values do not leak back."""
    state = CycleState()
    state.write(COUNT, 1)
    state.write(BOX, Box(1))
    copy = state.clone()
    copy.write(COUNT, 2)
    copy.read(BOX).value = 2
    assert state.read(COUNT) == 1
    assert state.read(BOX).value == 1
    copy.delete(COUNT)
    assert COUNT in state


def test_status_helpers() -> None:
    """Status values: success, skip, rejections and errors."""
    assert SUCCESS.is_success and not SUCCESS.is_rejection
    assert not SKIP.is_rejection
    st = unschedulable(PendingReason.RESOURCES, "busy")
    assert st.is_rejection and st.code is Code.UNSCHEDULABLE
    assert st.with_plugin("x").plugin == "x"
    assert error("boom", "p") == Status(
        Code.ERROR, PendingReason.WAITING_FOR_SCHEDULING, "boom", "p"
    )
