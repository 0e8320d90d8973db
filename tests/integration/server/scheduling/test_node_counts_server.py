"""How many nodes a job without -N gets, on a real server with real agents, as Slurm
22.05.8's sbatch.1 says and a two-node Slurm did: "enough nodes to satisfy the request"
(``-n 3`` on two-CPU nodes: two), one while its tasks fit on one. HAL refused ``-n 3``
there (as if ``-N 1`` had been given), and ``-N 1-2 -n 3`` too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from two_agents import SRUN, submit

from hal.testing.live import LiveServer, wait_until

SHOW = 'echo "NL=$SLURM_JOB_NODELIST TPN=$SLURM_TASKS_PER_NODE"\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("nodecounts")
    with LiveServer(data) as srv, srv.agents(2, cpus=2, memory="1G"):
        yield srv


def output(live: LiveServer, tmp_path: Path, job_id: int) -> str:
    def done() -> bool:
        with live.client() as c:
            return c.job(job_id).state == "COMPLETED"

    wait_until(done, 60, message=f"job {job_id} to complete")
    return (tmp_path / f"slurm-{job_id}.out").read_text()


def test_tasks_without_n_get_enough_nodes(server: LiveServer, tmp_path: Path) -> None:
    where = f"{SRUN} printenv SLURMD_NODENAME | sort | uniq -c | awk '{{print $1, $2}}'\n"
    three = submit(server, tmp_path, SHOW + where, "-n3")
    assert output(server, tmp_path, three) == "NL=node[1-2] TPN=2,1\n2 node1\n1 node2\n"
    ranged = submit(server, tmp_path, SHOW, "-n3", "-N1-2")
    assert output(server, tmp_path, ranged) == "NL=node[1-2] TPN=2,1\n"
    two = submit(server, tmp_path, SHOW, "-n2")  # (fits on one node: one)
    assert output(server, tmp_path, two).startswith("NL=node1 TPN=2\n")


def test_tasks_no_node_can_hold_even_spread_are_refused(server: LiveServer) -> None:
    done = server.cli("sbatch", "-n5", "--wrap", "true")
    assert done.returncode == 1
    assert "each node would need 3 CPUs" in done.stderr, done.stderr
