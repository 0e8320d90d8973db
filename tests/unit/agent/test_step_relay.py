"""srun's relayed stdin on a node (``hal.agent.step_input``): the agent appends what the
server sends to the step folder's input file (a repeat is harmless), and the keeper's
feeder gives it to each task that reads it through a pipe, which ends only at srun's
EOF (``input.end``), so a new agent can take over meanwhile; a task that reads nothing
holds nothing up."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_step_tasks import node_tasks, step

from hal.agent import step_input
from hal.agent.isolation import Isolation
from hal.agent.step_input import (
    CLOSED,
    INPUT_END,
    INPUT_WAKE,
    end_input,
    input_length,
    make_wakes,
    read_end,
    read_fed,
    wake,
    write_input,
)
from hal.agent.stepkeeper import KeeperPlan, keep, read_codes, read_ends
from hal.wire.agent import StepInput, StepLaunch


def wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise TimeoutError(what)


def test_the_input_file_skips_repeats_and_gaps(tmp_path: Path) -> None:
    folder = str(tmp_path)
    assert write_input(folder, 0, b"abc") == 3
    assert write_input(folder, 1, b"bcde") == 5  # (a resend from 1: "bc" is there)
    assert write_input(folder, 0, b"ab") == 5
    assert write_input(folder, 9, b"gap") == 5  # (never sent so: not written)
    assert (tmp_path / "input").read_bytes() == b"abcde"
    assert read_end(folder) is None
    end_input(folder, 5)
    end_input(folder, 7)  # (the end stays the first one)
    assert read_end(folder) == 5 and input_length(folder) == 5


def keeper_plan(folder: Path, argv: tuple[str, ...], ranks: tuple[int, ...]) -> KeeperPlan:
    return KeeperPlan(
        node="n1",
        folder=str(folder),
        argv=argv,
        env={"PATH": "/usr/bin:/bin"},
        ranks=ranks,
        marker="HAL_JOB_MARKER=t.12.0.0",
        workdir=str(folder),
        group="",
        memory_bytes=0,
        gpus=False,
        relayed=ranks[:2],
    )


@pytest.fixture
def keeper() -> Iterator[list[int]]:
    """Forks ``keep`` (the keeper's work) for a test; kills what is left after it."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except OSError:
            pass


def start(plan: KeeperPlan, pids: list[int]) -> int:
    read_end_, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the keeper
        code = 1
        try:
            os.close(read_end_)
            code = keep(plan, Isolation("none"), write_end)
        finally:
            os._exit(code)
    os.close(write_end)
    os.close(read_end_)
    pids.append(pid)
    return pid


def ended(pid: int) -> bool:
    return os.waitpid(pid, os.WNOHANG)[0] == pid


def test_tasks_read_the_input_until_its_end_others_read_nothing(
    tmp_path: Path, keeper: list[int]
) -> None:
    """Ranks 0 and 1 read the relayed input (their ``cat`` runs on while srun's input is
    open, across a quiet spell); rank 2 reads /dev/null and ends at once."""
    write_input(str(tmp_path), 0, b"hello\n")
    pid = start(keeper_plan(tmp_path, ("cat",), (0, 1, 2)), keeper)
    out = [tmp_path / f"out.{rank}" for rank in (0, 1)]
    wait_for(lambda: all(p.exists() and p.read_bytes() == b"hello\n" for p in out), "hello")
    wait_for(lambda: [r for r, _ in read_ends(str(tmp_path))] == [2], "rank 2's end")
    # (the feeder records what it gave after the writes that the tasks may copy first)
    wait_for(lambda: read_fed(str(tmp_path)) == {0: 6, 1: 6}, "the record of what was fed")
    assert not ended(pid)
    write_input(str(tmp_path), 6, b"world\n")
    end_input(str(tmp_path), 12)
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert read_codes(str(tmp_path)) == {0: 0, 1: 0, 2: 0}
    assert [p.read_bytes() for p in out] == [b"hello\nworld\n"] * 2
    assert (tmp_path / "out.2").read_bytes() == b""
    assert read_fed(str(tmp_path)) == {0: CLOSED, 1: CLOSED}


def test_tasks_that_read_nothing_of_an_endless_input_end(tmp_path: Path, keeper: list[int]) -> None:
    """No end written, a MiB no task reads: the tasks' ends end the keeper (its feeder
    killed with their leftovers), nothing waits for srun's input."""
    write_input(str(tmp_path), 0, b"x" * (1 << 20))
    pid = start(keeper_plan(tmp_path, ("true",), (0, 1)), keeper)
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert read_codes(str(tmp_path)) == {0: 0, 1: 0}
    assert not os.path.exists(tmp_path / INPUT_END)


def launch(tmp_path: Path, relay: list[int]) -> StepLaunch:
    return step(tmp_path, "cat", [0, 1], step_id=5).model_copy(update={"relay_ranks": relay})


def given(offset: int, data: bytes, eof: bool = False) -> StepInput:
    encoded = base64.b64encode(data).decode()
    return StepInput(job_id=12, step_id=5, offset=offset, data_b64=encoded, eof=eof)


def test_the_agent_writes_what_comes_and_reports_how_far_tasks_got(tmp_path: Path) -> None:
    """``StepInput`` into the input file (before the keeper made the folder too), the end
    once all before it is in; the feeder's places reported until a sync is answered."""
    tasks = node_tasks(tmp_path)
    tasks.launch(launch(tmp_path, [1]))
    folder = tmp_path / "steps" / "12.0.5"
    tasks.input(given(0, b"ab"))
    tasks.input(given(0, b"ab"))  # (a repeat: a reply overtaken, a session's resend)
    tasks.input(given(2, b"c", eof=True))
    assert (folder / "input").read_bytes() == b"abc" and read_end(str(folder)) == 3
    (folder / "fed").write_text("1 2\n")
    part = tasks.shell._parts[(12, 0, 5)]
    assert tasks.shell._read_fed(part) and tasks.pending()
    sent = tasks.outgoing()
    (report,) = sent.input_fed
    assert (report.rank, report.offset, report.closed) == (1, 2, False)
    tasks.delivered(sent)
    assert not tasks.pending() and tasks.outgoing().input_fed == []
    (folder / "fed").write_text(f"1 {CLOSED}\n")
    tasks.shell._read_fed(part)
    (report,) = tasks.outgoing().input_fed
    assert report.closed


def test_a_step_without_relayed_ranks_takes_no_input(tmp_path: Path) -> None:
    tasks = node_tasks(tmp_path)
    tasks.launch(launch(tmp_path, []))
    tasks.input(given(0, b"ab"))
    assert not (tmp_path / "steps" / "12.0.5" / "input").exists()


def test_the_agents_wake_up_not_the_feeders_next_look_brings_input(
    tmp_path: Path, keeper: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the feeder's looks 30 s apart, a line written with a wake-up (as the agent's
    ``StepTasks.input`` does) still reaches the task within seconds; one written without
    waits for the next look."""
    monkeypatch.setattr(step_input, "FEED_MIN_SECONDS", 30.0)
    monkeypatch.setattr(step_input, "FEED_MAX_SECONDS", 30.0)
    make_wakes(str(tmp_path), terminal=False)
    script = 'while read -r line; do echo "[$line]"; done'
    pid = start(keeper_plan(tmp_path, ("sh", "-c", script), (0,)), keeper)
    out = tmp_path / "out.0"
    wait_for((tmp_path / "fed").exists, "the feeder's start")
    time.sleep(0.5)  # (the feeder now waits: on its wake-up, or 30 s)
    write_input(str(tmp_path), 0, b"one\n")
    time.sleep(1.0)
    assert not out.exists() or out.read_text() == ""  # (no wake-up: not looked at yet)
    write_input(str(tmp_path), 4, b"two\n")
    wake(str(tmp_path), INPUT_WAKE)
    wait_for(lambda: out.exists() and out.read_text() == "[one]\n[two]\n", "both lines")
    end_input(str(tmp_path), 8)
    wake(str(tmp_path), INPUT_WAKE)  # (the end too: the task, the keeper, the feeder end)
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert read_codes(str(tmp_path)) == {0: 0}
