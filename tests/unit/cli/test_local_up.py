"""``hal up``'s own steps, where a real run cannot pick the moment (Ctrl-C mid-start)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hal.cli.local import _banner, _wait_healthy
from hal.testing.live import free_port


def test_ctrl_c_before_the_control_plane_answers_is_a_stop_not_an_error() -> None:
    """Ctrl-C while the control plane was still starting ended its serving task without
    an error, and waiting for it raised "the control plane stopped during start-up"
    (a traceback); now the wait says "stopped" and `hal up` stops as after start-up."""

    async def scenario() -> None:
        stop = asyncio.Event()
        serving = asyncio.create_task(stop.wait())  # a control plane ends when told to
        stop.set()  # Ctrl-C
        await serving
        assert await _wait_healthy(f"http://127.0.0.1:{free_port()}", serving, stop) is False

    asyncio.run(scenario())


def test_a_control_plane_that_ends_by_itself_during_start_up_is_still_an_error() -> None:
    async def scenario() -> None:
        async def fails() -> None:
            raise OSError("the database went away")

        serving = asyncio.create_task(fails())
        await asyncio.sleep(0)
        with pytest.raises(OSError, match="the database went away"):
            await _wait_healthy(f"http://127.0.0.1:{free_port()}", serving, asyncio.Event())

    asyncio.run(scenario())


def test_the_banner_names_the_credentials_file_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It always said ~/.config/hal/credentials.json, also where XDG_CONFIG_HOME put the
    token elsewhere."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    _banner("http://127.0.0.1:8470", tmp_path / "data", 2)
    out = capsys.readouterr().out
    assert f"your token is stored in {tmp_path}/xdg/hal/credentials.json" in out
