"""``sbatch --deadline``, as Slurm's: a pending job that can no longer end by its
deadline (now plus its ``--time-min``, else its time limit) is ended DEADLINE with
reason ``DeadLine`` and never runs; one that can still make it runs. ``scontrol show
job`` shows ``Deadline=``. Before, HAL refused the option."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with (
        LiveServer(tmp_path_factory.mktemp("deadline")) as live,
        live.agents(1, cpus=2),
    ):
        yield live


def sbatch(server: LiveServer, cwd: Path, *args: str) -> str:
    done = server.cli("sbatch", "--parsable", "-o", "/dev/null", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def ended(server: LiveServer, job: str) -> str:
    def state() -> str:
        found = server.cli("sacct", "-X", "-n", "-P", "-j", job, "-o", "State,Reason")
        return found.stdout.strip()

    wait_until(lambda: state().split("|")[0] not in ("PENDING", "RUNNING", ""), 60)
    return state()


def test_a_job_that_cannot_end_by_its_deadline_is_ended_deadline(
    server: LiveServer, tmp_path: Path
) -> None:
    late = sbatch(server, tmp_path, "-t", "30", "--deadline=now+10minutes", "--wrap", "true")
    assert ended(server, late) == "DEADLINE|DeadLine"
    squeue = server.cli("squeue", "-h", "-t", "all", "-j", late, "-o", "%T|%r")
    assert squeue.stdout.strip() == "DEADLINE|DeadLine"
    # its --time-min fits: it may start (and runs to its end)
    fits = sbatch(
        server, tmp_path, "-t", "30", "--time-min=5", "--deadline=now+10minutes",
        "--wrap", "true",
    )  # fmt: skip
    assert ended(server, fits).startswith("COMPLETED")
    shown = server.cli("scontrol", "show", "job", fits).stdout
    assert re.search(r" Deadline=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\n", shown), shown


def test_a_deadline_before_begin_is_refused(server: LiveServer, tmp_path: Path) -> None:
    done = server.cli(
        "sbatch", "-b", "now+2hours", "--deadline=now+1hour", "--wrap", "true", cwd=tmp_path
    )
    assert done.returncode == 1
    assert "Incompatible begin and deadline time specification" in done.stderr
