"""``HalServer.stop`` leaves no task behind: SIGHUPs that came while a reconfigure
ran (each a task that waits for the one before) are all held and cancelled at stop, not
only the last (a task only weakly held may vanish mid-run)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hal.api.server import HalServer
from hal.config.model import HalConfig


def test_every_pending_sighup_reconfigure_is_cancelled_at_stop(tmp_path: Path) -> None:
    config = tmp_path / "hal.toml"
    config.write_text("")

    async def scenario() -> None:
        cp = HalServer(
            HalConfig(), f"sqlite:///{tmp_path / 'hal.db'}", config_path=config,
            data_dir=tmp_path,
        )  # fmt: skip
        await cp.start()
        async with cp._reconfiguring:  # a reconfigure runs: the SIGHUPs wait for it
            cp._reconfigure_on_hangup()
            cp._reconfigure_on_hangup()
            await asyncio.sleep(0)
            hangups = [t for t in asyncio.all_tasks() if t.get_name() == "hal-reconfigure"]
            assert len(hangups) == 2
            await cp.stop()
            assert all(t.cancelled() for t in hangups), hangups

    asyncio.run(scenario())
