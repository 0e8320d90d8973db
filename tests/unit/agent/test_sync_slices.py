"""After a long server or database outage an agent sends its backlog of reports in slices
(``MAX_REPORTS_PER_SYNC``); jobs whose "finished" reports wait for a later slice are
still listed as running, or the server would end them as lost (NODE_FAIL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from hal.agent import shell
from hal.agent.channel import AgentChannel
from hal.agent.config import AgentConfig
from hal.agent.shell import AgentShell
from hal.wire.agent import JobReport


def finished(seq: int, job_id: int) -> JobReport:
    return JobReport(seq=seq, job_id=job_id, attempt=0, kind="finished", time=0.0)


def test_jobs_whose_reports_wait_for_a_later_slice_count_as_running(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(shell, "MAX_REPORTS_PER_SYNC", 2)
    agent = AgentShell(AgentConfig(state_dir=tmp_path, token="t"), cast(AgentChannel, None))
    agent.machine.outbox = [finished(1, 10), finished(2, 11), finished(3, 12), finished(4, 12)]
    request, _ = agent._sync_request(0.0)
    assert [r.job_id for r in request.reports] == [10, 11]
    assert request.running == [12]  # finished, but not yet reported: not lost
    agent.machine.outbox = agent.machine.outbox[:2]
    assert agent._sync_request(0.0)[0].running == []
