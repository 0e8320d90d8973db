"""Artifact aliases in the state store (hal.state.rollout), on SQLite and PostgreSQL: an
alias, its canary and its history outlive a server restart; only the name's owner or an
administrator moves it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal.core.errors import PermissionDenied
from hal.testing.live import LiveServer


def _program(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {name}\n")
    return path


def test_aliases_outlive_a_restart_and_belong_to_the_names_owner(
    each_store: LiveServer, tmp_path: Path
) -> None:
    live = each_store
    tokens = live.add_users("alice")
    with live.client() as c:
        shas = {v: c.push_artifact("app", v, _program(tmp_path, f"app{v}"))[0].sha256
                for v in ("1", "2", "3")}  # fmt: skip
        c.promote_artifact("app", "1", "stable")
        c.promote_artifact("app", "2", "stable")
        c.promote_artifact("app", "3", "stable", canary="25%")
    with live.client(tokens["alice"]) as alice:
        with pytest.raises(PermissionDenied, match="only they or an administrator"):
            alice.promote_artifact("app", "1", "stable")
        with pytest.raises(PermissionDenied, match="only they or an administrator"):
            alice.rollback_artifact("app")
        (seen,) = alice.artifact_aliases("app")  # anyone may look
    assert (seen.version, seen.canary, seen.share) == ("2", "3", 25.0)
    live.stop()
    live.start()
    with live.client() as c:
        (alias,) = c.artifact_aliases("app")
        assert (alias.alias, alias.version, alias.sha256) == ("stable", "2", shas["2"])
        assert (alias.canary, alias.canary_sha256, alias.share) == ("3", shas["3"], 25.0)
        assert (alias.history, alias.changed_by) == (["1"], "admin")
        assert c.artifact("app", "stable").version == "2"  # GET resolves the alias
        ended = c.rollback_artifact("app")  # the canary ends; the version stays
        assert (ended.version, ended.canary) == ("2", "")
        back = c.rollback_artifact("app")  # then back to the version before
        assert (back.version, back.history) == ("1", [])
