"""``--near`` on a real server with two real agents (the conftest's ``server``: 2 CPUs,
1 GiB each): a job submitted with ``hal submit --near=job:ID@node`` starts on the node of
the job it names, though best fit would put it on the other one; a rule naming no job is
refused by sbatch with what to write; and ``scontrol show job`` shows the rule."""

from __future__ import annotations

from pathlib import Path

from hal.testing.live import LiveServer, wait_until

SLEEP = ("--wrap", "sleep 60", "-o", "/dev/null")


def _submit(server: LiveServer, tmp_path: Path, *args: str, command: str = "sbatch") -> int:
    done = server.cli(command, "--parsable", *args, *SLEEP, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def _node_of(server: LiveServer, job: int) -> str:
    with server.client() as c:
        wait_until(lambda: c.job(job).state == "RUNNING", 20, message=f"job {job} running")
        (node,) = c.job(job).nodes
        return node


def test_near_job_at_node_lands_on_the_node_of_the_job_it_names(
    server: LiveServer, tmp_path: Path
) -> None:
    """The target holds 1 CPU and 64 MiB of node2; a filler holds 1 CPU and 512 MiB of
    node1, the fuller node that best fit picks for a 1-CPU job. The job near the target
    takes node2's last CPU instead."""
    target = _submit(server, tmp_path, "-w", "node2", "-c1", "--mem=64M")
    filler = _submit(server, tmp_path, "-w", "node1", "-c1", "--mem=512M")
    assert _node_of(server, target) == "node2" and _node_of(server, filler) == "node1"
    near = _submit(
        server, tmp_path, f"--near=job:{target}@node", "-c1", "--mem=64M", command="submit"
    )
    assert _node_of(server, near) == "node2"
    shown = server.cli("scontrol", "show", "job", str(near))
    assert f"Near=job:{target}@node" in shown.stdout.split()
    for job in (target, filler, near):
        server.cli("scancel", str(job))


def test_a_rule_naming_no_job_is_refused_saying_what_to_write(
    server: LiveServer, tmp_path: Path
) -> None:
    done = server.cli("sbatch", "--apart=job:987654@node", *SLEEP, cwd=tmp_path)
    assert done.returncode != 0
    assert "there is no job 987654; name a pending or running job" in done.stderr
    done = server.cli("sbatch", "--near=name:nosuch@rack", *SLEEP, cwd=tmp_path)
    assert done.returncode != 0
    assert "no pending or running job of yours is named 'nosuch'" in done.stderr
