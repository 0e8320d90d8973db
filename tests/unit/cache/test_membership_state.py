"""A cache node's saved place in the tree (``--state-dir``): used when the node is started
without one, and for routing while the control plane is away; a node restarted with
another ``--parent-id`` moves there (the saved parent used to win)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal.cache.controlclient import ControlPlaneClient
from hal.cache.membership import Membership, Registration


def _membership(tmp_path: Path, reg: Registration) -> Membership:
    (tmp_path / "L.json").write_text(
        json.dumps({"parentId": "r1", "tier": "leaf", "chain": [["r1", "h1:6379"]]})
    )
    client = ControlPlaneClient("http://127.0.0.1:9", "L")
    return Membership(client, reg, tmp_path, stats=dict, on_forgotten=lambda: None)


@pytest.mark.parametrize(
    ("flags", "parent", "chain"),
    [
        ({}, "r1", [("r1", "h1:6379")]),  # no flags: its place of last time
        ({"parent_id": "r1", "tier": "leaf"}, "r1", [("r1", "h1:6379")]),
        ({"parent_id": "r2", "tier": "leaf"}, "r2", []),  # moved: the old chain is not its
        ({"tier": "root"}, None, []),  # now a root
    ],
)
def test_the_flags_win_over_the_saved_place(
    tmp_path: Path, flags: dict[str, str], parent: str | None, chain: list[tuple[str, str]]
) -> None:
    m = _membership(tmp_path, Registration(address="h:1", **flags))  # type: ignore[arg-type]
    assert (m.reg.parent_id, m.chain) == (parent, chain)
    assert m.reg.body()["tier"] == (flags.get("tier") or "leaf")


def test_an_unreadable_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "L.json").write_text("[1, 2]")
    client = ControlPlaneClient("http://127.0.0.1:9", "L")
    m = Membership(client, Registration(address="h:1"), tmp_path, dict, lambda: None)
    assert (m.reg.parent_id, m.chain) == (None, [])
