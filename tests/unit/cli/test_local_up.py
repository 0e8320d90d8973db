"""``hal up``'s own steps, where a real run cannot pick the moment (Ctrl-C mid-start),
and what it prints: its banner and what it says when it stops."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from hal.cli.host_share import split_host
from hal.cli.local import _wait_healthy
from hal.cli.local_stop import STOPPED_BY, Stopped, kept_lines, stopped_lines
from hal.cli.up_banner import Banner
from hal.core.resources import GiB
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


def banner(tmp_path: Path, **kw: object) -> str:
    shares = split_host(2, [0, 1], 24 * GiB)
    up = Banner("http://127.0.0.1:8470", "hal_SECRET", tmp_path / "data", shares, **kw)  # type: ignore[arg-type]
    return "\n".join(up.lines())


def test_the_banner_names_the_credentials_file_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It always said ~/.config/hal/credentials.json, also where XDG_CONFIG_HOME put the
    token elsewhere."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert f"your token is stored in {tmp_path}/xdg/hal/credentials.json" in banner(tmp_path)


def test_the_banner_names_the_dashboard_with_a_login_link_the_state_and_each_agent(
    tmp_path: Path,
) -> None:
    """It named the URL alone: the dashboard went unseen, and logging in to it took a
    token dug out of a JSON file. The token rides in the link's fragment, which no
    browser sends to a server."""
    text = banner(tmp_path)
    assert text.startswith("HAL is up: http://127.0.0.1:8470  (REST API, /docs)\n")
    assert "  dashboard:    http://127.0.0.1:8470/ui#token=hal_SECRET  (logs you in)" in text
    assert "?token=" not in text
    assert f"  state:        {tmp_path}/data  (kept when HAL stops" in text
    assert "  agents:       node1: 1 CPU (host CPU 0), 12.0 GiB\n" in text
    assert "                node2: 1 CPU (host CPU 1), 12.0 GiB\n" in text


def test_the_banner_says_what_ctrl_c_does_with_running_jobs(tmp_path: Path) -> None:
    assert "running jobs are cancelled with the cluster (--keep-jobs: left running)" in (
        banner(tmp_path)
    )
    kept = banner(tmp_path, keep_jobs=True, adopted=("4", "7_1"))
    assert "running jobs keep running (--keep-jobs): the next `hal up` on this state" in kept
    assert "  adopted:      2 job(s) kept running since the last stop (4, 7_1)" in kept


def test_a_repository_venv_is_named_for_other_shells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make up` runs .venv/bin/hal: another shell has no `hal` until it activates it."""
    venv = tmp_path / "repo" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    (tmp_path / "repo" / "pyproject.toml").write_text("")
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.chdir(tmp_path / "repo")
    assert "  other shells: . .venv/bin/activate  (or use .venv/bin/hal)\n" in banner(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert f". {venv}/bin/activate  (or use {venv}/bin/hal)" in banner(tmp_path)
    (tmp_path / "repo" / "pyproject.toml").unlink()  # a venv of no repository: hal is on PATH
    assert "activate" not in banner(tmp_path)


def test_stopping_says_how_many_jobs_stopped_and_what_is_left() -> None:
    done = Stopped(ended=["3", "4"], left=["9"], pending=2)
    assert stopped_lines(done, "/srv/hal") == [
        f"hal: stopped 2 running job(s) with the cluster (3, 4): CANCELLED by {STOPPED_BY}",
        "hal: 1 job(s) had not ended when hal up stopped waiting (9); the next `hal up` on "
        "/srv/hal adopts them",
        "hal: 2 pending job(s) stay queued; the next `hal up` runs them",
    ]
    assert kept_lines(["3"], 0, "/srv/hal") == [
        "hal: 1 job(s) keep running (3); the next `hal up` on /srv/hal adopts them"
    ]
    assert kept_lines([], 0, "/srv/hal") == stopped_lines(Stopped(), "/srv/hal") == []
