"""A cache node's read counters: what it served, what it missed, what it pulled from where.

Counted since the node started (``CONFIG RESETSTAT`` zeroes them, as Redis does with
``keyspace_hits``). A *read* is a client's ``GET``/``MGET``/``HAL.STAGE`` key or another
node's ``HAL.FETCH … PULL`` (a branch serving its leaves counts their misses as its own
reads: fan-in shows as the branch's hits). A hit is answered from the node's own copy; a
miss pulls through the tree, ending ``pulled`` (a copy came from the parent chain or a
peer) or ``not_found`` (nil). Bytes count value bytes only.

The node reports them three ways: ``INFO stats`` (``hal_*`` fields), each heartbeat to the
control plane (the ``halStats`` object, an extension the contract allows: its heartbeat
schema does not close its properties), and from there ``GET /v1/instances`` (the HAL
server's data service reads them and publishes ``hal_cache_*`` on its ``/metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCES = ("parent", "peer")


@dataclass(slots=True)
class NodeStats:
    hits: int = 0
    misses: int = 0
    not_found: int = 0  # misses nothing upstream had
    bytes_served: int = 0  # value bytes sent to clients and to other nodes
    pulls_parent: int = 0
    pulls_peer: int = 0
    bytes_parent: int = 0  # value bytes pulled from the parent chain
    bytes_peer: int = 0

    def pulled(self, source: str, size: int) -> None:
        if source == "peer":
            self.pulls_peer += 1
            self.bytes_peer += size
        else:
            self.pulls_parent += 1
            self.bytes_parent += size

    @property
    def pulls(self) -> int:
        return self.pulls_parent + self.pulls_peer

    def reset(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_json(self, evictions: int, expirations: int) -> dict[str, Any]:
        """The heartbeat's ``halStats`` object."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "missesNotFound": self.not_found,
            "bytesServed": self.bytes_served,
            "pulls": {"parent": self.pulls_parent, "peer": self.pulls_peer},
            "bytesPulled": {"parent": self.bytes_parent, "peer": self.bytes_peer},
            "evictions": evictions,
            "expirations": expirations,
        }

    def info_lines(self) -> list[str]:
        """Extra ``INFO stats`` fields (``keyspace_hits``/``_misses`` are printed apart)."""
        return [
            f"hal_pulls:{self.pulls}",
            f"hal_misses_not_found:{self.not_found}",
            f"hal_bytes_served:{self.bytes_served}",
            f"hal_pulls_parent:{self.pulls_parent}",
            f"hal_pulls_peer:{self.pulls_peer}",
            f"hal_bytes_pulled_parent:{self.bytes_parent}",
            f"hal_bytes_pulled_peer:{self.bytes_peer}",
        ]
