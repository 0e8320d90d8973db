"""``CycleState``: scratch space with typed keys.

A job's cycle gets a fresh ``CycleState``; what a PreFilter computes there, the same
plugin's Filter and Score read back. The pass as a whole has one more (``PassContext.data``)
for what plugins accumulate across jobs (array-throttle counts, singleton names) and for
per-pass caches.

Keys are objects, not strings: ``StateKey[int]("arraythrottle.counts")`` can only hold an
``int``, so two plugins cannot collide on a name and mypy checks every read. ``clone`` makes
a what-if copy (preemption, backfill): the mapping is copied, the values are shared, so a
plugin that mutates a stored value in place must store a value with its own ``clone``
(see ``Clonable``) or replace the value instead of mutating it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


class StateKey(Generic[T]):
    """A typed key. Identity matters, not the name: make one module-level constant each."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


@runtime_checkable
class Clonable(Protocol):
    def clone(self) -> Clonable: ...


class CycleState(dict[object, object]):
    """StateKey → value. A dict underneath, so that making one (one per job cycle, tens of
    thousands a pass) and ``get`` cost no Python call; only ``write`` (or ``state[key] =
    value``, typed alike), ``read``, ``get``, ``in``, ``delete`` and ``clone`` are its
    interface."""

    __slots__ = ()

    if TYPE_CHECKING:

        def get(self, key: StateKey[T]) -> T | None:  # type: ignore[override]
            """dict.get, typed by the key."""

        def __setitem__(self, key: StateKey[T], value: T) -> None:  # type: ignore[override]
            """``state[KEY] = value``: ``write`` without its call, typed by the key."""

    def write(self, key: StateKey[T], value: T) -> None:
        self[key] = value

    def read(self, key: StateKey[T]) -> T:
        """The value under ``key``; ``KeyError`` naming the key if nobody wrote it (a
        missing PreFilter is a wiring bug, not a scheduling outcome)."""
        try:
            return self[key]  # type: ignore[return-value]  # (no ``cast``: a call)
        except KeyError:
            raise KeyError(f"{key.name} was never written to this CycleState") from None

    def delete(self, key: StateKey[T]) -> None:
        self.pop(key, None)

    def clone(self) -> CycleState:
        return CycleState(
            {
                key: value.clone() if isinstance(value, Clonable) else value
                for key, value in self.items()
            }
        )
