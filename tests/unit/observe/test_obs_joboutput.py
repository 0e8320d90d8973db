"""Reading a job's output on a shared filesystem, and what is refused."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hal.core.errors import NotFound, PermissionDenied, Unavailable
from hal.server.observe.joboutput import open_output, output_path, read_output
from hal.testing.builders import make_job


def job_in(tmp: Path, stdout: str | None = None, stderr: str | None = None):  # type: ignore[no-untyped-def]
    job = make_job(42).name("train").running_on("node7").build()
    # a user unknown on this host: its jobs run as the agent's (here: our) user
    spec = job.spec.with_changes(workdir=str(tmp), user="nobody-here", stdout=stdout,
                                 stderr=stderr)  # fmt: skip
    return job.evolve(spec=spec)


def collect(fd: int, **kw: object) -> bytes:
    async def run() -> bytes:
        return b"".join([c async for c in read_output(fd, **kw)])  # type: ignore[arg-type]

    return asyncio.run(run())


def test_the_path_follows_the_agents_pattern_rules(tmp_path: Path) -> None:
    assert output_path(job_in(tmp_path), "stdout") == str(tmp_path / "slurm-42.out")
    job = job_in(tmp_path, stdout="%x-%N-%j.log", stderr="err-%4j.txt")
    assert output_path(job, "stdout") == str(tmp_path / "train-node7-42.log")
    assert output_path(job, "stderr") == str(tmp_path / "err-0042.txt")


def test_a_pending_job_has_no_output() -> None:
    with pytest.raises(NotFound):
        output_path(make_job(1).build(), "stdout")


def test_reads_all_or_the_tail(tmp_path: Path) -> None:
    (tmp_path / "slurm-42.out").write_bytes(b"line 1\nline 2\n")
    job = job_in(tmp_path)
    assert collect(open_output(job, "stdout")) == b"line 1\nline 2\n"
    assert collect(open_output(job, "stdout"), tail_bytes=7) == b"line 2\n"


def test_follow_ends_once_the_job_finished_and_the_file_stopped_growing(tmp_path: Path) -> None:
    path = tmp_path / "slurm-42.out"
    path.write_bytes(b"a\n")
    calls = []

    def finished() -> bool:
        calls.append(1)
        if len(calls) == 1:
            with path.open("ab") as f:
                f.write(b"b\n")
        return len(calls) > 1

    assert collect(open_output(job_in(tmp_path), "stdout"), follow=True,
                   finished=finished) == b"a\nb\n"  # fmt: skip


def test_a_missing_file_is_unavailable_not_an_error(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="not on the control plane"):
        open_output(job_in(tmp_path), "stdout")


def test_symlinks_are_refused(tmp_path: Path) -> None:
    """--output=/etc/shadow via a link must not make the server read a file for a user."""
    (tmp_path / "secret").write_text("x")
    os.symlink(tmp_path / "secret", tmp_path / "slurm-42.out")
    with pytest.raises(PermissionDenied):
        open_output(job_in(tmp_path), "stdout")


@pytest.mark.skipif(os.getuid() != 0 or not Path("/etc/shadow").exists(),
                    reason="needs root and a file owned by another user")  # fmt: skip
def test_a_file_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    job = job_in(tmp_path, stdout="/etc/shadow")
    job = job.evolve(spec=job.spec.with_changes(user="nobody"))
    with pytest.raises(PermissionDenied):
        open_output(job, "stdout")
