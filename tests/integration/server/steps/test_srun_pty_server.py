"""``srun --pty``: an interactive shell on an allocated node, driven from srun's own
terminal. A real server with two real agents; srun runs as the installed shim in a real
pseudo-terminal of this test's (``Terminal``), as a user's terminal emulator holds one."""

from __future__ import annotations

import re
import subprocess
import termios
import time
from pathlib import Path

import pytest
from two_agents import (
    login_env,
)

from hal.core.errors import InvalidRequest
from hal.testing.live import LiveServer
from hal.testing.terminal import Terminal
from hal.wire.steps import StepCreate

RELAYED = {"relay_input": True, "input_rank": 0}
PROMPT = b"hal-pty$ "
PROMPTED = re.escape(PROMPT)  # (expect takes a pattern)


def shell(server: LiveServer, shims: Path, cwd: Path, *args: str) -> Terminal:
    env = {**login_env(server, shims), "PS1": PROMPT.decode(), "TERM": "xterm"}
    argv = [str(shims / "srun"), *args, "--pty", "bash", "--norc", "--noprofile"]
    return Terminal(argv, env, cwd, (30, 100))


def test_srun_pty_gives_an_interactive_shell_on_the_node(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    term = shell(server, shims, tmp_path, "-w", "node2")
    try:
        term.expect(PROMPTED)
        term.type(b'tty; stty size; echo "on $SLURMD_NODENAME job $SLURM_JOB_ID"\r')
        said = term.expect(PROMPTED).decode()
        assert re.search(r"/dev/pts/\d+", said), said  # a terminal, not a pipe
        assert "30 100" in said  # srun's terminal's size
        term.type(b'echo "win=$SLURM_PTY_WIN_ROW,$SLURM_PTY_WIN_COL"\r')  # (Slurm's too)
        assert b"win=30,100" in term.expect(PROMPTED)
        job = int(re.search(r"on node2 job (\d+)", said).group(1))  # type: ignore[union-attr]
        # Ctrl-C ends the shell's foreground command, not the session
        term.type(b"sleep 60\r")
        time.sleep(1.0)
        term.type(b"\x03")
        term.expect(PROMPTED, timeout=10)
        term.type(b"echo after=$?\r")
        assert b"after=130" in term.expect(PROMPTED)
        # a resized window resizes the task's terminal
        term.resize(40, 120)
        time.sleep(1.0)
        term.type(b"stty size\r")
        term.expect(rb"\r40 120\r\n")  # (after bash redraws its prompt for the new size)
        term.type(b"exit 7\r")
        assert term.wait() == 7
        assert termios.tcgetattr(term.slave) == term.modes  # srun gave its terminal back
    finally:
        term.close()
    done = server.cli("sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State,ExitCode")
    assert f"{job}|FAILED|7:0" in done.stdout.splitlines(), done.stdout


def test_srun_pty_inside_an_allocation_reads_keys_as_a_terminal(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """Under salloc (its job's variables in the environment), the keys reach the task's
    terminal line by line: a program reading stdin gets what was typed, and Ctrl-D ends
    its input."""
    env = login_env(server, shims)
    alloc = subprocess.run(
        [str(shims / "salloc"), "-N1", "--no-shell"],
        env=env, cwd=tmp_path, text=True, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert alloc.returncode == 0, alloc.stderr
    job = re.search(r"Granted job allocation (\d+)", alloc.stderr).group(1)  # type: ignore[union-attr]
    env.update({"SLURM_JOB_ID": job, "PS1": PROMPT.decode()})
    argv = [str(shims / "srun"), "--jobid", job, "--pty", "sh", "-c", "cat > typed.txt"]
    term = Terminal(argv, env, tmp_path, (24, 80))
    try:
        term.await_raw()
        term.type(b"first line\rsecond\r\x04")
        assert term.wait() == 0
        with server.client() as c:  # the API's checks of a terminal's step
            bare = StepCreate(argv=["true"], pty=[24, 80])  # (no relayed input for it)
            with pytest.raises(InvalidRequest, match="relays srun's input to task 0"):
                c.create_step(int(job), bare)
            step = c.create_step(int(job), bare.model_copy(update=RELAYED))
            with pytest.raises(InvalidRequest, match="rows and columns are 1 to 65535"):
                c.send_step_input(int(job), step.step_id, 0, b"", winsize=(0, 80))
    finally:
        term.close()
        server.cli("scancel", job)
    assert (tmp_path / "typed.txt").read_text() == "first line\nsecond\n"


def test_srun_pty_shows_task_0_alone_labelled_and_its_failure_as_slurms(
    server: LiveServer, shims: Path, tmp_path: Path
) -> None:
    """As Slurm 22.05.8's (on the peer): with -n2 only task 0's terminal is
    shown (the other tasks' output goes nowhere), -l labels it, and srun's own lines end
    CR LF while its terminal is raw."""
    argv = [
        str(shims / "srun"), "-n2", "-l", "--pty",
        "bash", "-c", "echo rank=$SLURM_PROCID; tty; exit 7",
    ]  # fmt: skip
    term = Terminal(argv, login_env(server, shims), tmp_path, (24, 80))
    try:
        assert term.wait() == 7
        shown = term.expect(rb"exit code 7\r\n", timeout=5)
    finally:
        term.close()
    # a loaded machine's grant that takes longer than salloc's QUEUED_AFTER_SECONDS says
    # it waited first, as Slurm's does
    waited = rb"(srun: job \d+ queued and waiting for resources\r\n"
    waited += rb"srun: job \d+ has been allocated resources\r\n)?"
    said = rb"srun: error: node\d: tasks 0-1: Exited with exit code 7\r\n"  # (both exit 7)
    assert re.fullmatch(waited + rb"0: rank=0\r\n0: /dev/pts/\d+\r\n" + said, shown), shown
