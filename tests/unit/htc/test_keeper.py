"""``keeper.keep``: a worker job's first process starts a new worker when a task kills
one, and ends when the worker ends on purpose. In a subprocess each (the keeper forks,
which a test process with threads must not do)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

# Start n (counted in a file: each start is a new fork of the keeper) ends the n-th way
# in argv; each start prints the ``died`` it was given, the keeper its exit status.
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from hal.htc.keeper import keep
    count, ways = sys.argv[1], sys.argv[2:]
    def child(died):
        with open(count, "a+") as f:
            f.write("x")
            f.seek(0)
            way = ways[len(f.read()) - 1]
        print(repr(died), flush=True)
        if way == "_exit 13":
            os._exit(13)
        if way.startswith("signal"):
            os.kill(os.getpid(), getattr(signal, way.split()[1]))
        if way == "raise":
            raise RuntimeError("a bug of the worker's own")
        return None if way == "return None" else int(way.split()[1])
    print("keeper", keep(child))
    """
)


def keep(count: Path, *ways: str) -> tuple[list[str], int, str]:
    """The ``died`` of each start, the keeper's exit status and its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(count), *ways],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    *died, last = done.stdout.splitlines()
    return [ast.literal_eval(d) for d in died], int(last.split()[1]), done.stderr


def test_a_worker_killed_by_its_task_is_started_again_and_told_how_the_last_ended(
    tmp_path: Path,
) -> None:
    died, status, err = keep(
        tmp_path / "n", "_exit 13", "signal SIGSEGV", "return None", "return 0"
    )
    assert died[0] == "" and status == 0
    assert [d.split(") ", 1)[1] for d in died[1:]] == [
        "exited with status 13",
        "was killed by signal 11 (SIGSEGV)",
        "exited with status 1",  # returned None: its executable service died
    ]
    assert all(d.startswith("the worker process (pid ") for d in died[1:])
    assert err.count("; starting a new one\n") == 3


def test_a_worker_that_ends_on_purpose_ends_the_job_with_its_status(tmp_path: Path) -> None:
    assert keep(tmp_path / "a", "return 3")[:2] == ([""], 3)  # its service failed to load
    died, status, err = keep(tmp_path / "b", "raise", "return 0")
    assert (died, status) == ([""], 1) and "a bug of the worker's own" in err  # said


def test_a_worker_killed_by_sigkill_ends_the_job(tmp_path: Path) -> None:
    """SIGKILL is the out-of-memory killer's: the job ends, and its end state says so."""
    died, status, err = keep(tmp_path / "n", "signal SIGKILL", "return 0")
    assert (died, status, err) == ([""], 137, "")
