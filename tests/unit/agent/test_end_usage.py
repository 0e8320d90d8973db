"""What a job's end report says it used: the supervisor's figures, raised to what the
agent's samples showed (``sstat``), and its GPU samples' tally."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

from hal.agent.batch import _Supervised
from hal.agent.channel import AgentChannel
from hal.agent.config import AgentConfig
from hal.agent.events import ProcessExited
from hal.agent.gpuusage import GpuTally, ProcessGpu
from hal.agent.launcher import ChildWatch
from hal.agent.records import ExitOutcome
from hal.agent.shell import AgentShell


def ended(tmp_path: Path, outcome: ExitOutcome | None) -> tuple[AgentShell, ExitOutcome]:
    """The end event of job 7's supervisor (pid 1234), which left ``outcome``."""
    agent = AgentShell(AgentConfig(state_dir=tmp_path, token="t"), cast(AgentChannel, None))
    usage = agent.usage
    usage._peaks = {(7, 0): 900 << 20, (8, 0): 50 << 20}
    tally = GpuTally()
    tally.add(ProcessGpu(6 << 30, 100))
    tally.add(ProcessGpu(2 << 30, 50))
    usage._gpu_tallies = {(7, 0): tally}
    loop = asyncio.new_event_loop()
    try:
        watch = ChildWatch(loop, None, lambda _: None, lambda: None)
        watch.pid, watch.ticks = 1234, 1
        event = agent.batch._end_event(_Supervised(7, 0, str(tmp_path), watch), outcome)
    finally:
        loop.close()
    assert isinstance(event, ProcessExited)
    return agent, event.outcome


def test_the_end_report_keeps_the_most_memory_any_sample_saw(tmp_path: Path) -> None:
    _, outcome = ended(tmp_path, ExitOutcome(exit_code=0, max_rss_bytes=400 << 20))
    assert outcome.max_rss_bytes == 900 << 20  # sstat showed 900 MiB: sacct shows no less
    _, more = ended(tmp_path, ExitOutcome(max_rss_bytes=1 << 30))
    assert more.max_rss_bytes == 1 << 30  # the supervisor's figure where it is more


def test_the_end_report_carries_the_gpu_tally_once(tmp_path: Path) -> None:
    agent, outcome = ended(tmp_path, None)  # a lost supervisor still reports its samples
    assert outcome.lost and outcome.gpu is not None
    assert (outcome.gpu.max_mem_bytes, outcome.gpu.max_util, outcome.gpu.ave_util) == (
        6 << 30,
        100,
        75.0,
    )
    assert agent.usage._gpu_tallies == {}
