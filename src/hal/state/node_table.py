"""``NodeTable``: the mirror's nodes by name, with a version that moves at every change.

A cluster of 10,000 nodes made two things walk every node for nothing: each scheduling
pass's snapshot sorted them by name, and each submitted job's admission listed its
partition's nodes (a 1,000-job batch: ten million checks). Both now keep what they made
while ``version`` stays the same: a node added, replaced (a heartbeat's new state, a
registration's new resources) or removed moves it, whichever mutator did it."""

from __future__ import annotations

from typing import Any

from hal.core.node import Node


class NodeTable(dict[str, Node]):
    """A ``dict`` of nodes whose every mutator moves ``version``."""

    version: int = 0

    def __setitem__(self, name: str, node: Node) -> None:
        self.version += 1
        super().__setitem__(name, node)

    def __delitem__(self, name: str) -> None:
        self.version += 1
        super().__delitem__(name)

    def pop(self, name: str, *default: Any) -> Any:
        self.version += 1
        return super().pop(name, *default)

    def popitem(self) -> tuple[str, Node]:
        self.version += 1
        return super().popitem()

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def setdefault(self, name: str, default: Node) -> Node:
        self.version += 1
        return super().setdefault(name, default)

    def __ior__(self, other: Any) -> NodeTable:  # type: ignore[override,misc]
        self.version += 1
        return super().__ior__(other)
