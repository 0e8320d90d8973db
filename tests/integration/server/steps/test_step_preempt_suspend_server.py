"""Preemption mode ``suspend`` of a job running a step on two nodes, with a real server
and two real agents: the victim's step task on node2 stops with the batch script (not
only the script on node1), goes on once the preemptor ended, and the step completes
with its count unbroken."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.priority import priority_from_dict
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType
from hal.testing.live import LiveServer, tree_stopped, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"
OVERRIDES = {
    "kill_wait_seconds": 2,
    "priority": priority_from_dict(
        {"qos": [{"name": "high", "priority": 100, "preempt": ["low"]}, {"name": "low"}]}
    ),
    "preemption": PreemptionPolicy(PreemptType.QOS, PreemptMode.SUSPEND),
}
# the task on node2 counts until the test lets it end: still running however slow the
# machine, and ending only once it went on counting after the suspension
COUNTER = (
    "[ $SLURM_NODEID = 1 ] || exit 0; echo $$ > pid.1; i=0; "
    "while [ ! -e stop ]; do i=$((i + 1)); echo $i >> counter; sleep 0.1; done; echo done"
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides=OVERRIDES)
    with server, server.agents(2, cpus=1, memory="1G"):
        yield server


def _sbatch(live: LiveServer, tmp_path: Path, body: str, *args: str) -> int:
    script = tmp_path / f"job{len(list(tmp_path.glob('job*.sh')))}.sh"
    script.write_text("#!/bin/bash\n" + body)
    done = live.cli("sbatch", "--parsable", *args, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_suspended_victims_step_stops_on_every_node_and_goes_on(
    live: LiveServer, tmp_path: Path
) -> None:
    counter, high_ends = tmp_path / "counter", tmp_path / "high.ends"
    body = f"{SRUN} sh -c '{COUNTER}'\necho srun exit=$?\n"
    with live.client() as client:
        low = _sbatch(live, tmp_path, body, "-N2", "--qos=low")
        try:
            wait_until(lambda: len(_lines(counter)) >= 3, 60, message="the step counting")
            pid = int((tmp_path / "pid.1").read_text())
            wait = f"while [ ! -e {high_ends} ]; do sleep 0.1; done\n"
            high = _sbatch(live, tmp_path, wait, "--qos=high")
            wait_until(lambda: client.job(high).state == "RUNNING", 30, message="the preemptor")
            assert client.job(low).state == "SUSPENDED"
            wait_until(lambda: tree_stopped(pid), 15, message="the task on node2 to stop")
            frozen = len(_lines(counter))
            time.sleep(1.0)  # a running task would have counted about 10 more meanwhile
            assert tree_stopped(pid) and len(_lines(counter)) == frozen
            high_ends.touch()
            wait_until(lambda: len(_lines(counter)) > frozen + 2, 30, message="counting on")
            (tmp_path / "stop").touch()
            wait_until(lambda: client.job(low).state == "COMPLETED", 30, message="the victim")
        finally:
            high_ends.touch()
            (tmp_path / "stop").touch()
    lines = _lines(counter)
    assert lines == [str(i) for i in range(1, len(lines) + 1)]  # one run, no gap
    out = (tmp_path / f"slurm-{low}.out").read_text()
    assert "done" in out and "srun exit=0" in out, out
    acct = live.cli("sacct", "-j", f"{low}.0", "-n", "-P", "-o", "JobID,State")
    assert acct.stdout.strip() == f"{low}.0|COMPLETED", acct.stdout + acct.stderr
