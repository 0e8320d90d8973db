"""Fixtures for the cache integration tests: one shared tree, and fresh small trees."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cachetree import ControlPlane, Node, registered, start_all, wait_for


class Tree:
    """root ─┬─ b1 ─┬─ l1
    │      └─ l2
    └─ b2 ─── l3"""

    def __init__(self, tmp: Path, *cp_args: str, node_args: tuple[str, ...] = ()) -> None:
        self.cp = ControlPlane(tmp, None, *cp_args)
        self.nodes = {
            "root": Node(tmp, self.cp, "root", None, "root", *node_args),
            "b1": Node(tmp, self.cp, "b1", "root", "branch", *node_args),
            "b2": Node(tmp, self.cp, "b2", "root", "branch", *node_args),
            "l1": Node(tmp, self.cp, "l1", "b1", "leaf", *node_args),
            "l2": Node(tmp, self.cp, "l2", "b1", "leaf", *node_args),
            "l3": Node(tmp, self.cp, "l3", "b2", "leaf", *node_args),
        }

    def __getitem__(self, iid: str) -> Node:
        return self.nodes[iid]

    def start(self) -> None:
        self.cp.start()
        start_all(list(self.nodes.values()))
        wait_for(lambda: registered(self.cp, list(self.nodes)), 15, "every node registered")
        # a node that joined before its parent registered completes its chain on a heartbeat
        for node in self.nodes.values():
            wait_for(
                lambda node=node: node.client().info("server")["hal_chain_complete"] == 1,
                15,
                f"{node.iid} to know its parent chain",
            )

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()
        self.cp.kill()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    t = Tree(tmp_path_factory.mktemp("tree"))
    try:
        t.start()
        yield t
    finally:
        t.stop()


PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    import secrets

    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as err:
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})")
    name = "hal_cache_test_" + secrets.token_hex(4)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
