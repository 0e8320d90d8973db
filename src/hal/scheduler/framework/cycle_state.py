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

from typing import Generic, Protocol, TypeVar, cast, runtime_checkable

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


class CycleState:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[object, object] = {}  # StateKey → value

    # No ``cast`` in ``get`` and ``write``: it is a function call, and they run tens of
    # thousands of times a pass.

    def write(self, key: StateKey[T], value: T) -> None:
        self._data[key] = value

    def read(self, key: StateKey[T]) -> T:
        """The value under ``key``; ``KeyError`` naming the key if nobody wrote it (a
        missing PreFilter is a wiring bug, not a scheduling outcome)."""
        try:
            return cast("T", self._data[key])
        except KeyError:
            raise KeyError(f"{key.name} was never written to this CycleState") from None

    def get(self, key: StateKey[T]) -> T | None:
        return self._data.get(key)  # type: ignore[return-value]

    def __contains__(self, key: StateKey[T]) -> bool:
        return key in self._data

    def delete(self, key: StateKey[T]) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        copy = CycleState()
        for key, value in self._data.items():
            copy._data[key] = value.clone() if isinstance(value, Clonable) else value
        return copy
