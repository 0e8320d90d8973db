"""The server's passes take their bounds from ``[scheduler]`` (ADR 0029): at start, and
again at ``hal reconfigure`` (a site that finds its passes too long or too shallow
changes them without a restart)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hal.api.server import HalServer
from hal.config.model import load_config
from hal.core.errors import InvalidRequest
from hal.scheduler.forked import FORK_FROM
from hal.scheduler.service import PassBounds


def test_the_passes_bounds_come_from_the_config_and_follow_reconfigure(tmp_path: Path) -> None:
    config = tmp_path / "hal.toml"
    config.write_text("[scheduler]\ndefault_queue_depth = 7\nsched_interval = 5\n")

    async def scenario() -> None:
        cp = HalServer(
            load_config(config), f"sqlite:///{tmp_path / 'hal.db'}", config_path=config,
            data_dir=tmp_path,
        )  # fmt: skip
        paced = cp.paced
        assert paced.bounds == PassBounds(7, 5.0, 1000)
        await cp.start()
        try:
            config.write_text("[scheduler]\ndefault_queue_depth = 0\nmax_job_starts = 50\n")
            await cp.reconfigure()
            assert paced.bounds == PassBounds(0, 60.0, 50)
        finally:
            await cp.stop()

    asyncio.run(scenario())


def test_passes_are_forked_as_the_config_says_and_reconfigure_keeps_it(tmp_path: Path) -> None:
    """``[scheduler] pass_process`` (ADR 0031): "thread" by default, "fork" always,
    "auto" from ``FORK_FROM`` jobs; bound at start, so a reconfigure keeps it and says
    so."""
    made = {}
    for where in ("auto", "fork"):
        path = tmp_path / f"{where}.toml"
        path.write_text(f"[scheduler]\npass_process = '{where}'\n")
        made[where] = HalServer(
            load_config(path), f"sqlite:///{tmp_path / where}.db", data_dir=tmp_path
        )
    auto, always = made["auto"].forked, made["fork"].forked
    assert auto is not None and auto.fork_from == FORK_FROM
    assert made["auto"].paced.scheduler is auto
    assert always is not None and always.fork_from == 0
    config = tmp_path / "hal.toml"
    config.write_text("")

    async def scenario() -> None:
        cp = HalServer(
            load_config(config), f"sqlite:///{tmp_path / 'hal.db'}", config_path=config,
            data_dir=tmp_path,
        )  # fmt: skip
        assert cp.forked is None and cp.paced.scheduler is cp.scheduler
        await cp.start()
        try:
            config.write_text("[scheduler]\npass_process = 'fork'\n")
            done = await cp.reconfigure()
            assert "scheduler.pass_process" in done.kept
            assert cp.forked is None and cp.paced.scheduler is cp.scheduler
        finally:
            await cp.stop()

    asyncio.run(scenario())


def test_a_pass_process_that_is_neither_is_refused_with_the_choices(tmp_path: Path) -> None:
    config = tmp_path / "hal.toml"
    config.write_text("[scheduler]\npass_process = 'spawn'\n")
    with pytest.raises(InvalidRequest, match="pass_process must be one of auto, fork, thread"):
        load_config(config)
