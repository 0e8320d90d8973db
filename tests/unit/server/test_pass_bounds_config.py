"""The server's passes take their bounds from ``[scheduler]`` (ADR 0029): at start, and
again at ``hal reconfigure`` (a site that finds its passes too long or too shallow
changes them without a restart)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hal.api.server import HalServer
from hal.config.model import load_config
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
