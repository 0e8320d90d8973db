"""``hal login --server A --server B``: a site of a leader and standbys logs in once, the
token checked at whichever leads and stored for every address (the servers share their
users), so a command given either, or both, finds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal.cli.main import main
from hal.client.config import load_client_config
from hal.testing.live import LiveServer, free_port


def test_login_takes_every_server_and_stores_the_token_for_each(
    env: LiveServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HAL_TOKEN")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "5")
    down = f"http://127.0.0.1:{free_port()}"  # a head node not answering now
    code = main(["login", "--server", down, "--server", f"{env.url}/", "--token", env.token])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"logged in to {down},{env.url} as " in out
    stored = json.loads((tmp_path / "config" / "hal" / "credentials.json").read_text())
    assert stored[down]["token"] == stored[env.url]["token"] == env.token
    assert load_client_config(down).token == env.token
