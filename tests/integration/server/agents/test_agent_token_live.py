"""A real `hal agent` holding an agent token bound to its node (``hal user add NAME
--agent --nodes node1``, read from ``--token-file`` as a node's setup puts it) runs a job
to completion; the same token cannot make another agent join as node2."""

from __future__ import annotations

from pathlib import Path

from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit


def test_a_real_agent_with_a_node_bound_agent_token_runs_a_job(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "srv") as live:
        added = live.cli("user", "add", "rack1", "--agent", "--nodes", "node1")
        assert added.returncode == 0, added.stderr
        token_file = tmp_path / "agent.token"
        token_file.write_text(added.stdout.splitlines()[1].rsplit(": ", 1)[1] + "\n")
        token_file.chmod(0o600)
        # HAL_TOKEN is no token at all: the agents must take the file's
        extra = ["--token-file", str(token_file)]
        live.start_agent("node1", token="hal_not_a_token", extra=extra)
        live.start_agent("node2", token="hal_not_a_token", extra=extra)
        alice = live.add_users("alice")["alice"]
        with live.client(alice) as c:
            wait_until(lambda: any(n.name == "node1" and n.state == "UP" for n in c.nodes()))
            script = "#!/bin/sh\necho ran on $SLURMD_NODENAME > done.txt\n"
            job = c.submit(JobSubmit(script=script, workdir=str(tmp_path))).job_id
            wait_until(lambda: c.job(job).state == "COMPLETED", 60, message="the job")
            assert (tmp_path / "done.txt").read_text() == "ran on node1\n"
            log = live.data_dir / "agent-node2.log"
            wait_until(
                lambda: "agent token rack1 may not serve node 'node2'" in log.read_text(),
                30,
                message="node2's agent to be refused",
            )
            assert "node2" not in {n.name for n in c.nodes()}
