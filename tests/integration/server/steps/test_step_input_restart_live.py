"""srun's relayed stdin outlives a control-plane restart (ADR 0012, "srun's input"):
srun keeps what the tasks were not given yet and sends it again to the new server,
which took the relay up from ``running_steps``. Before, the new server gave the tasks
an early end and srun warned that the input was lost, and an ``srun --pty`` shell took
no more keys. Real servers, two real agents, real srun: in a batch script reading a
FIFO the test writes, and in a pseudo-terminal as a user's terminal holds one."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, stop_process, wait_until
from hal.testing.terminal import Terminal

SRUN = f"{sys.executable} -m hal.cli.main srun"
# rank 1 reads nothing until ``go`` exists: what its pipe does not hold stays in srun's
# and the server's hands, so the restart comes while they hold it
TASK = (
    "touch started.$SLURM_PROCID; "
    "if [ $SLURM_PROCID = 1 ]; then while [ ! -e go ]; do sleep 0.1; done; fi; "
    "cat > got.$SLURM_PROCID"
)
PROMPT = b"hal-pty$ "


class Restarts:
    """A server with two agents that the test stops and starts again on the same data
    and port; the agents, jobs, steps and sruns run on across it."""

    def __init__(self, data: Path) -> None:
        self.first = LiveServer(data, config_overrides={"kill_wait_seconds": 2})
        self.second: LiveServer | None = None

    @property
    def now(self) -> LiveServer:
        return self.second or self.first

    def restart(self) -> None:
        """Stop the server (only it); ``start_again`` starts the second."""
        self.first._agents.clear()  # (they run on)
        self.first.stop()

    def start_again(self) -> None:
        self.second = LiveServer(
            self.first.data_dir, port=self.first.port, config_overrides={"kill_wait_seconds": 2}
        )
        self.second.token = self.first.token
        self.second.start()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Restarts]:
    s = Restarts(tmp_path / "srv")
    s.first.start()
    agents = [s.first.start_agent(f"node{i}", memory="1G") for i in (1, 2)]
    try:
        with s.first.client() as c:
            wait_until(lambda: sum(n.state == "UP" for n in c.nodes()) == 2, message="agents")
        yield s
    finally:
        for agent in agents:
            stop_process(agent)
        s.first.end_fork_servers()
        if s.second is not None:
            s.second.stop()


def test_sruns_input_outlives_the_restart_of_the_server(servers: Restarts, tmp_path: Path) -> None:
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\nexec 3<{fifo}\n{SRUN} -n2 sh -c '{TASK}' <&3\necho srun exit=$?\n"
    )
    writer = os.open(fifo, os.O_RDWR)  # (opens at once; the job's read end follows)
    before = bytes(range(256)) * 800  # 200 KiB: more than rank 1's pipe takes
    during, after = b"typed while the server was away\n", b"and after it\n"
    try:
        done = servers.first.cli("sbatch", "--parsable", "-N2", str(script), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        job_id = int(done.stdout.strip())
        for rank in (0, 1):
            wait_until((tmp_path / f"started.{rank}").exists, 60, message=f"task {rank}")
        os.write(writer, before)
        got0 = tmp_path / "got.0"
        wait_until(lambda: got0.exists() and got0.stat().st_size == len(before), 30)
        servers.restart()
        os.write(writer, during)
        servers.start_again()
        (tmp_path / "go").touch()
        os.write(writer, after)
        os.close(writer)
        with servers.now.client() as c:
            wait_until(lambda: c.job(job_id).state == "COMPLETED", 60, message="the job's end")
        out = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "srun exit=0" in out and "lost" not in out, out
        whole = before + during + after
        for rank in (0, 1):
            assert (tmp_path / f"got.{rank}").read_bytes() == whole, f"rank {rank}"
    finally:
        with contextlib.suppress(OSError):  # (closed above unless it failed first)
            os.close(writer)


def test_an_srun_pty_shell_takes_keys_again_after_the_restart_of_the_server(
    servers: Restarts, tmp_path: Path
) -> None:
    """Keys typed while the server is away reach the shell once it is back."""
    shims = tmp_path / "bin"
    done = servers.first.cli("compat", "install-shims", str(shims), "--force")
    assert done.returncode == 0, done.stderr
    env = {
        k: v
        for k, v in servers.first.env().items()
        if not k.startswith(("SLURM_", "SALLOC_", "SBATCH_", "HAL_SALLOC", "HAL_JOB"))
    }
    env |= {"PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "PS1": PROMPT.decode()}
    argv = [str(shims / "srun"), "--pty", "bash", "--norc", "--noprofile"]
    term = Terminal(argv, {**env, "TERM": "xterm"}, tmp_path, (30, 100))
    try:
        term.expect(re.escape(PROMPT))
        term.type(b"echo before=$SLURM_JOB_ID\r")
        assert re.search(rb"before=\d+", term.expect(re.escape(PROMPT)))
        servers.restart()
        term.type(b"echo during\r")
        servers.start_again()
        said = term.expect(rb"\rduring\r\n.*" + re.escape(PROMPT), timeout=60)
        # srun's own line while its terminal is raw ends CR LF, as the shell's lines do
        assert re.search(rb"srun: the control plane is away \(.*\); still following.*\r\n", said)
        term.type(b"exit 3\r")
        assert term.wait() == 3
    finally:
        term.close()
