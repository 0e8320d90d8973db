"""srun --pty on a node (``hal.agent.step_input``, ``stepkeeper``): the keeper gives rank
0 a pseudo-terminal of srun's size as its stdin, stdout, stderr and controlling
terminal; the feeder types srun's relayed keys into it, copies what it writes to the
task's stdout file (to its last byte, after the task ends), and resizes it when the
agent writes srun's new size. Other ranks keep their files."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from test_step_relay import ended, keeper, keeper_plan, start, wait_for  # noqa: F401
from test_stepkeeper_start_failure import UNUSED_UID, folder  # noqa: F401  (a fixture)

from hal.agent.step_input import write_input, write_size
from hal.agent.stepkeeper import KeeperPlan, read_codes

# what rank 0 runs: says its terminal and size, answers one line typed, then its size
# again after SIGWINCH, then prints a last burst and exits 3 at once
SCRIPT = r"""
trap 'echo "resized $(stty size)"' WINCH
echo "tty=$(tty) size=$(stty size)"
read -r line; echo "got [$line]"
read -r again
seq 1 2000 | tr -d '\n'; echo
echo "stderr too" >&2
exit 3
"""


def terminal_plan(where: Path) -> KeeperPlan:
    plan = keeper_plan(where, ("sh", "-c", SCRIPT), (0, 1))
    return dataclasses.replace(plan, relayed=(0,), pty=(33, 101))


def test_rank_0_runs_in_a_terminal_fed_by_the_input_and_resized(
    tmp_path: Path,
    keeper: list[int],  # noqa: F811
) -> None:
    out = tmp_path / "out.0"

    def shown() -> bytes:  # (bytes: read_text would turn the terminal's CR LF into LF)
        return out.read_bytes() if out.exists() else b""

    pid = start(terminal_plan(tmp_path), keeper)
    wait_for(lambda: b"tty=/dev/pts/" in shown(), "rank 0's terminal")
    assert b"size=33 101\r\n" in shown()
    write_input(str(tmp_path), 0, b"hello there\r")  # (Enter is a CR from a raw terminal)
    wait_for(lambda: b"got [hello there]" in shown(), "the typed line")
    assert b"hello there\r\n" in shown()  # the terminal echoed it
    write_size(str(tmp_path), 50, 140)
    wait_for(lambda: b"resized 50 140" in shown(), "the resize")
    write_input(str(tmp_path), 12, b"\r")
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert read_codes(str(tmp_path)) == {0: 3, 1: 3}
    text = shown()
    assert b"19981999200" in text and text.endswith(b"stderr too\r\n")  # all, in order
    assert (tmp_path / "err.0").read_text() == ""  # (stderr is the terminal too)
    assert (tmp_path / "out.1").read_text().startswith("tty=not a tty")  # rank 1: files


def test_a_terminal_without_input_ends_with_its_task(
    tmp_path: Path,
    keeper: list[int],  # noqa: F811
) -> None:
    """No key ever typed: the task's end ends the feeder and the keeper."""
    plan = dataclasses.replace(terminal_plan(tmp_path), argv=("sh", "-c", "tty; exit 0"))
    pid = start(plan, keeper)
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert read_codes(str(tmp_path)) == {0: 0, 1: 0}
    assert (tmp_path / "out.0").read_text().startswith("/dev/pts/")
    assert os.path.exists(tmp_path / "fed")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the task as another uid")
def test_the_terminal_belongs_to_the_tasks_user(
    folder: Path,  # noqa: F811  (open to the task's user: pytest's tmp_path is not)
    keeper: list[int],  # noqa: F811
) -> None:
    """As login and sshd hand a session its terminal: owned by the job's user, mode
    620, so programs that check their tty (``mesg``, ``script``, ``write``) work."""
    plan = dataclasses.replace(
        terminal_plan(folder),
        argv=("sh", "-c", 'stat -c "%u %a" "$(tty)"'),
        uid=UNUSED_UID,
        gid=UNUSED_UID,
        groups=(),
    )
    pid = start(plan, keeper)
    wait_for(lambda: ended(pid), "the keeper's end")
    keeper.remove(pid)
    assert (folder / "out.0").read_bytes() == f"{UNUSED_UID} 620\r\n".encode()
