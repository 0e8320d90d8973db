"""Topology labels: where a node stands in a hybrid cluster (rack, zone, region, site).

Nodes carry labels (``rack=r1``, ``zone=z1``...) from their agent
(``--topology-label``) or from the config's ``[[topology.labels]]``. When the cluster has
no switch tree and no blocks, the labels *are* the placement tree: a node's path is
``("site=S", "region=R", "zone=Z", "rack=K")`` (root first, as ``Node.topology``), so
level 0 is the rack, level 1 the zone, level 2 the region and level 3 the site.

A label a node lacks: above the rack, the node belongs to one unnamed domain of that
level (``zone=``), shared by every node without it, so racks without a zone still group
together; without a rack, the node is a rack of its own (``rack=~NODE``), because
putting unlabelled nodes into one rack would invent a fast network that is not there.
A node with no labels at all has no path (``()``), as in a cluster without topology.

Pure: imports only ``hal.core``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hal.core.errors import InvalidRequest

# leaf first: level k of a label path is LABEL_LEVELS[k]
LABEL_LEVELS: tuple[str, ...] = ("rack", "zone", "region", "site")
_OWN = "~"  # the prefix of the rack of a node without a rack label


def check_labels(labels: Mapping[str, str], *, field: str = "topology_labels") -> None:
    """Refuse keys other than rack/zone/region/site and empty or odd values."""
    for key, value in labels.items():
        if key not in LABEL_LEVELS:
            raise InvalidRequest(
                f"unknown topology label {key!r}; use one of {', '.join(LABEL_LEVELS)}",
                field=field,
            )
        if not value or "=" in value or value.startswith(_OWN) or any(c.isspace() for c in value):
            raise InvalidRequest(
                f"invalid value {value!r} for topology label {key}: give a non-empty name "
                "without spaces, '=' or a leading '~'",
                field=field,
            )


def parse_label(text: str) -> tuple[str, str]:
    """``"rack=r1"`` → ``("rack", "r1")`` (the agent's ``--topology-label``)."""
    key, eq, value = text.strip().partition("=")
    if not eq:
        raise InvalidRequest(
            f"invalid topology label {text!r}; write KEY=VALUE, e.g. rack=r1",
            field="topology_labels",
        )
    check_labels({key: value})
    return key, value


def label_path(node: str, labels: Mapping[str, str]) -> tuple[str, ...]:
    """The node's placement path from its labels, root first (``()`` without labels)."""
    if not any(labels.get(k) for k in LABEL_LEVELS):
        return ()
    rack = labels.get("rack") or _OWN + node
    upper = tuple(f"{k}={labels.get(k, '')}" for k in reversed(LABEL_LEVELS[1:]))
    return (*upper, f"rack={rack}")


def level_of_label(element: str) -> str | None:
    """``"zone=z1"`` → ``"zone"``; None for a switch or block name."""
    key, eq, _ = element.partition("=")
    return key if eq and key in LABEL_LEVELS else None


def present_levels(all_labels: Iterable[Mapping[str, str]]) -> tuple[str, ...]:
    """The label levels at least one node has, leaf first."""
    seen = {k for labels in all_labels for k, v in labels.items() if v}
    return tuple(k for k in LABEL_LEVELS if k in seen)


def display_name(element: str) -> str:
    """A path element as people read it: ``"rack=r1"`` → ``r1``, ``"zone="`` → ``(no zone)``."""
    key, _, value = element.partition("=")
    if not value:
        return f"(no {key})"
    if value.startswith(_OWN):
        return f"(own rack: {value[1:]})"
    return value
