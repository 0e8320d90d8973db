"""``sbatch job.sh ARGS`` on a real server with real agents: the script gets the words
after its path as ``$1``, ``$2``, ... (one with a space stays one word, one starting with
``-`` is no sbatch option), again when requeued, in every array element and once for a
het job; ``scontrol show job`` shows them in ``Command=``, REST in ``script_args``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until

# one line per run: the argument count and the first three arguments
SCRIPT = (
    "#!/bin/bash\n"
    "#SBATCH -c 1\n"
    'echo "$#:$1:$2:$3" >> "args-${SLURM_ARRAY_TASK_ID:-$SLURM_JOB_ID}.txt"\n'
)
ARGS = ("two words", "-x", "--foo")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("args")) as srv, srv.agents(2, cpus=2, memory="1G"):
        yield srv


def submit(server: LiveServer, tmp_path: Path, *argv: str) -> int:
    (tmp_path / "job.sh").write_text(SCRIPT)
    done = server.cli("sbatch", "--parsable", *argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def finished(server: LiveServer, ident: str, restarts: int = 0) -> bool:
    with server.client() as c:
        jobs = c.jobs(ids=[ident], include_finished=True)
    return bool(jobs) and all(j.state == "COMPLETED" and j.restarts == restarts for j in jobs)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_the_script_gets_its_arguments_and_keeps_them_when_requeued(
    server: LiveServer, tmp_path: Path
) -> None:
    job = submit(server, tmp_path, "-J", "argy", "job.sh", *ARGS)
    wait_until(lambda: finished(server, str(job)), message="the job to complete")
    out = tmp_path / f"args-{job}.txt"
    assert lines(out) == ["3:two words:-x:--foo"]
    shown = server.cli("scontrol", "show", "job", str(job)).stdout
    assert f"Command={tmp_path / 'job.sh'} two words -x --foo\n" in shown, shown
    with server.client() as c:
        info = c.job(job)
    assert (info.script_path, info.script_args) == (str(tmp_path / "job.sh"), list(ARGS))
    assert info.name == "argy"  # -J before the script is sbatch's; nothing after it is
    requeue = server.cli("scontrol", "requeue", str(job))
    assert requeue.returncode == 0, requeue.stderr
    wait_until(lambda: finished(server, str(job), restarts=1), message="the second run")
    assert lines(out) == ["3:two words:-x:--foo"] * 2


def test_every_array_element_gets_the_same_arguments(server: LiveServer, tmp_path: Path) -> None:
    job = submit(server, tmp_path, "--array=1-3", "job.sh", "a b", "-c", "")
    wait_until(lambda: finished(server, str(job)), message="the array to complete")
    for task in (1, 2, 3):
        assert lines(tmp_path / f"args-{task}.txt") == ["3:a b:-c:"]


def test_a_het_job_runs_its_script_once_with_the_arguments(
    server: LiveServer, tmp_path: Path
) -> None:
    het = submit(server, tmp_path, "-c1", ":", "-c1", "job.sh", "one", ":")
    wait_until(lambda: finished(server, str(het)), message="the het job to complete")
    assert lines(tmp_path / f"args-{het}.txt") == ["2:one:::"]
    assert not (tmp_path / f"args-{het + 1}.txt").exists()


def test_a_script_from_stdin_has_no_arguments_and_no_command(
    server: LiveServer, tmp_path: Path
) -> None:
    done = server.cli("sbatch", "--parsable", input_text=SCRIPT, cwd=tmp_path)
    job = int(done.stdout.strip())
    wait_until(lambda: finished(server, str(job)), message="the job to complete")
    assert lines(tmp_path / f"args-{job}.txt") == ["0:::"]
    assert "Command=(null)\n" in server.cli("scontrol", "show", "job", str(job)).stdout
