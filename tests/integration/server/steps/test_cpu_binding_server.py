"""Jobs bound to their own CPUs of the host (``hal agent --bind-cpus``, Slurm's
``task/affinity``), on a real server with real agents: two one-CPU jobs running at once
on a node get different CPUs and ``nproc`` says 1 in each; a two-CPU job gets both; the
steps the agents run for a job on other nodes are bound to that job's CPUs there, and
``--exact`` steps to CPUs of their own among the job's."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_step_cpus_server import finished
from two_agents import SRUN, submit

from hal.agent.isolation import detect_isolation
from hal.testing.live import LiveServer, wait_until

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs a host of at least two CPUs to bind to"
)
SHOW = "echo $(grep Cpus_allowed_list /proc/self/status | cut -f2) $(nproc)"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("cpubind")
    with (
        LiveServer(data) as srv,
        srv.agents(2, cpus=2, memory="1G", extra=["--bind-cpus", "yes"]),
    ):
        yield srv


def test_jobs_sharing_a_node_run_on_cpus_of_their_own(server: LiveServer, tmp_path: Path) -> None:
    first = submit(server, tmp_path, f"{SHOW}\nsleep 4\n", "-n1", "-w", "node1")
    second = submit(server, tmp_path, f"{SHOW}\nsleep 1\n", "-n1", "-w", "node1")
    a, b = finished(server, tmp_path, first).split(), finished(server, tmp_path, second).split()
    assert a[1] == b[1] == "1", (a, b)  # nproc: the job's one CPU
    assert a[0] != b[0], (a, b)  # one CPU each, not the same
    assert {a[0], b[0]} <= {str(c) for c in os.sched_getaffinity(0)}
    both = submit(server, tmp_path, f"{SHOW}\n", "-n2", "-w", "node1")
    cpus, count = finished(server, tmp_path, both).split()
    assert count == "2" and re.fullmatch(r"\d+[-,]\d+", cpus), (cpus, count)


def test_steps_on_other_nodes_run_on_the_jobs_cpus_there(
    server: LiveServer, tmp_path: Path
) -> None:
    job_id = submit(server, tmp_path, f"{SRUN} -l sh -c '{SHOW}'\n", "-N2", "-n2")
    lines = [line.split() for line in finished(server, tmp_path, job_id).splitlines()]
    assert sorted(line[0] for line in lines) == ["0:", "1:"], lines
    for _, cpus, count in lines:  # a CPU on each node, the task's job's there
        assert count == "1" and cpus.isdigit(), lines


def test_exact_steps_run_on_cpus_of_their_own_within_the_jobs(
    server: LiveServer, tmp_path: Path
) -> None:
    """Two ``srun -n1 --exact`` at once in a two-CPU job get a CPU each of the job's (srun
    runs them on the batch node); a plain step runs on both; across nodes the agents bind
    an ``--exact`` step's tasks to their own CPU of the job's on each node."""
    here = submit(
        server,
        tmp_path,
        "\n".join(
            [
                f"{SRUN} -n1 --exact sh -c '{SHOW}; sleep 2' &",
                f"{SRUN} -n1 --exact sh -c '{SHOW}; sleep 2' &",
                "wait",
                f"{SRUN} -n1 sh -c 'echo plain $({SHOW})'",
                "",
            ]
        ),
        "-n2",
        "-w",
        "node1",
    )
    lines = [line.split() for line in finished(server, tmp_path, here).splitlines()]
    exact = [line for line in lines if line[0] != "plain"]
    assert len(exact) == 2 and all(count == "1" for _, count in exact), lines
    assert exact[0][0] != exact[1][0], lines  # not the same CPU
    assert [lines[-1][0], lines[-1][2]] == ["plain", "2"], lines
    across = submit(server, tmp_path, f"{SRUN} -l -N2 -n2 --exact sh -c '{SHOW}'\n", "-N2", "-n4")
    tasks = [line.split() for line in finished(server, tmp_path, across).splitlines()]
    assert sorted(t[0] for t in tasks) == ["0:", "1:"], tasks
    assert all(t[2] == "1" for t in tasks), tasks  # one CPU of the job's two on each node


def test_a_restarted_agent_keeps_its_running_jobs_cpus(server: LiveServer, tmp_path: Path) -> None:
    """The agent is killed while a job runs bound to a CPU; the agent started again on
    the same state directory adopts the job with its CPU (read back from its plan), so
    the next job gets the other one."""
    binding = ["--bind-cpus", "yes"]
    agent = server.start_agent("node3", cpus=2, memory="1G", extra=binding)
    with server.client() as c:
        wait_until(lambda: any(n.name == "node3" and n.state == "UP" for n in c.nodes()))
    first = submit(server, tmp_path, f"{SHOW}\nsleep 6\n", "-n1", "-w", "node3")
    server.wait_job_started("node3", first)
    agent.kill()
    agent.wait(10)
    again = server.start_agent("node3", cpus=2, memory="1G", extra=binding)
    try:
        second = submit(server, tmp_path, f"{SHOW}\n", "-n1", "-w", "node3")
        b = finished(server, tmp_path, second).split()
        a = finished(server, tmp_path, first).split()
        assert a[0] != b[0], (a, b)
    finally:
        again.kill()
        again.wait(10)


def fence_available() -> bool:
    """Whether this host lets an agent fence jobs with cpusets (root, and the cpuset
    controller: cgroup1's hierarchy, or cgroup2's delegated)."""
    try:
        probe = detect_isolation("auto", "fence-probe", cores="auto")
    except OSError:
        return False
    probe.release()
    return bool(probe.cores)


# one write of the whole line: with PYTHONUNBUFFERED (CI's environment, which jobs
# inherit) print() writes each word and the newline apart, and two steps writing at
# once interleaved as "01\n\n"
WIDEN = (
    "python3 -c 'import os, sys; os.sched_setaffinity(0, os.sched_getaffinity(0) | "
    "{int(c) for c in sys.argv[1:]}); "
    'os.write(1, (" ".join(map(str, sorted(os.sched_getaffinity(0)))) + "\\n").encode())\''
)

# as WIDEN, then waits (at most 60 s) until two steps have written into the folder its
# first argument names
HOLD = (
    "python3 -c 'import os, sys, time; d = sys.argv[1]; "
    "os.sched_setaffinity(0, os.sched_getaffinity(0) | {int(c) for c in sys.argv[2:]}); "
    'os.write(1, (" ".join(map(str, sorted(os.sched_getaffinity(0)))) + "\\n").encode()); '
    'open(os.path.join(d, str(os.getpid())), "w").close(); end = time.time() + 60; '
    "[time.sleep(0.05) for _ in iter(lambda: len(os.listdir(d)) < 2 and time.time() < end, False)]'"
)

CPUSET = "grep -E '^[0-9]+:(cpuset)?:' /proc/self/cgroup | sort | tail -1"


def cpuset_folder(line: str) -> Path:
    """The folder of ``/proc/self/cgroup``'s cpuset line (cgroup1), or unified one."""
    _, controllers, path = line.split(":", 2)
    return Path("/sys/fs/cgroup/cpuset" if controllers else "/sys/fs/cgroup", path.lstrip("/"))


@pytest.mark.skipif(not fence_available(), reason="no cpuset controller the agent may use")
def test_a_job_cannot_widen_its_cpus_past_its_fence(server: LiveServer, tmp_path: Path) -> None:
    """As Slurm's ``ConstrainCores=yes`` (docs/slurm-checks.md): a one-CPU job asking
    for every CPU of the host keeps its one, in its batch script and in the steps the
    agents run for it, and two ``--exact`` steps srun runs at once keep one CPU each; the
    kernel narrows the request and nobody sees an error. An
    agent with ``--constrain-cores no`` binds the job the same way but lets it widen.
    The job's cpuset cgroup goes with it."""
    every = " ".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    script = f"{CPUSET}\n{WIDEN} {every}\n{SRUN} -l -N2 -n2 {WIDEN} {every}\n"
    job_id = submit(server, tmp_path, script, "-N2", "-n2")
    where, *lines = finished(server, tmp_path, job_id).splitlines()
    assert f"/job_{job_id}." in where, where
    assert len(lines) == 3 and all(len(line.split()) == 1 for line in lines[:1]), lines
    assert sorted(line.split()[0] for line in lines[1:]) == ["0:", "1:"], lines
    assert all(len(line.split()) == 2 for line in lines[1:]), lines  # one CPU each
    assert not cpuset_folder(where).exists()
    # srun's --exact steps on the batch node: each fenced to its own CPU of the job's two
    # (each holds its CPU until both have run: one that ended first would give the
    # other its CPU back, rightly, on a loaded machine)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    exact = f"{SRUN} -n1 --exact {HOLD} {barrier} {every} &\n"
    steps = submit(server, tmp_path, f"{exact}{exact}wait\n", "-n2", "-w", "node1")
    each = finished(server, tmp_path, steps).split()
    assert len(each) == 2 and each[0] != each[1], each
    binding = ["--bind-cpus", "yes", "--constrain-cores", "no"]
    agent = server.start_agent("node4", cpus=2, memory="1G", extra=binding)
    try:
        with server.client() as c:
            wait_until(lambda: any(n.name == "node4" and n.state == "UP" for n in c.nodes()))
        loose = submit(server, tmp_path, f"{WIDEN} {every}\n", "-n1", "-w", "node4")
        assert finished(server, tmp_path, loose).split() == every.split()
    finally:
        agent.kill()
        agent.wait(10)
