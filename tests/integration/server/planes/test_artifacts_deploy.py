"""Artifacts deployed on real agents (docs/user/artifacts.md): a job's batch script and its
steps on other nodes find what it pinned on PATH and in HAL_ARTIFACT_<NAME>, each node
fetches a copy once, and a copy that cannot be fetched fails the launch with the reason."""

from __future__ import annotations

import io
import os
import re
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete

from hal.state import schema
from hal.state.store import SqlStateStore
from hal.testing import http
from hal.testing.live import LiveServer, wait_until

SRUN = f"{sys.executable} -m hal.cli.main srun"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("hal")) as live, live.agents(2, cpus=2):
        yield live


def _tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return path


def _run(live: LiveServer, tmp_path: Path, script: str, *args: str) -> tuple[str, str]:
    (tmp_path / "job.sh").write_text(script)
    submitted = live.cli("sbatch", "--parsable", "-o", "out.txt", *args, "job.sh", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state not in ("PENDING", "RUNNING"), 60, message="end")
        state = c.job(job_id).state
    out = tmp_path / "out.txt"
    return state, out.read_text() if out.exists() else ""


def _last_job(live: LiveServer) -> int:
    with live.client() as c:
        return max(j.id for j in c.jobs(include_finished=True))


def _copies(live: LiveServer, node: str) -> dict[str, int]:
    """The node's copies: digest → the inode of its ``ready`` file (a new fetch makes a
    new copy)."""
    root = live.data_dir / "agents" / node / "artifacts"
    if not root.is_dir():
        return {}  # (no copy yet: the agent makes the folder with its first)
    return {p.name: (p / "ready").stat().st_ino for p in root.iterdir() if (p / "ready").exists()}


def _agent_downloads(live: LiveServer) -> float:
    text = http.get(f"{live.url}/metrics", timeout=10).text
    found = re.search(r'^hal_artifact_downloads_total\{to="agent"\} (\S+)$', text, re.M)
    assert found, "no hal_artifact_downloads_total"
    return float(found.group(1))


def test_the_batch_script_and_its_steps_on_both_nodes_run_it(
    server: LiveServer, tmp_path: Path
) -> None:
    tool = b"#!/bin/sh\necho tool-1.0 says $1 on $SLURMD_NODENAME\n"
    tarball = _tarball(tmp_path / "tool.tgz", {"tool-1.0/bin/tool": tool, "tool-1.0/README": b"hi"})
    with server.client() as c:
        sha = c.push_artifact("tool", "1.0", tarball)[0].sha256
    script = (
        "#!/bin/sh\n#SBATCH --artifact=tool@1.0\n"
        'echo "root=$HAL_ARTIFACT_TOOL"\ntool batch\n'
        f"{SRUN} -l sh -c 'tool step; cat $HAL_ARTIFACT_TOOL/README; echo'\n"
    )
    state, out = _run(server, tmp_path, script, "-N2", "-n2")
    assert state == "COMPLETED", out
    lines = out.splitlines()
    root = server.data_dir / "agents" / "node1" / "artifacts" / sha / "tree" / "tool-1.0"
    assert lines[0] == f"root={root}"
    assert lines[1] == "tool-1.0 says batch on node1"
    assert sorted(lines[2:6]) == [
        "0: hi",
        "0: tool-1.0 says step on node1",
        "1: hi",
        "1: tool-1.0 says step on node2",
    ]
    assert len(lines) == 6
    assert not (root / "README").stat().st_mode & 0o222  # read-only: a job cannot change it
    assert sha in _copies(server, "node1") and sha in _copies(server, "node2")


def test_a_program_and_a_zip_in_one_job_and_a_copy_is_fetched_once(
    server: LiveServer, tmp_path: Path
) -> None:
    program = tmp_path / "hello"
    program.write_bytes(b"#!/bin/sh\necho hello from a single file\n")
    bundle = tmp_path / "bundle.zip"
    with zipfile.ZipFile(bundle, "w") as z:
        info = zipfile.ZipInfo("bin/run")
        info.external_attr = 0o755 << 16
        z.writestr(info, "#!/bin/sh\necho zip run\n")
        z.writestr("data/table.csv", "a,b\n")
    with server.client() as c:
        c.push_artifact("hello", "1", program)
        c.push_artifact("bundle", "2024.1", bundle)
    script = (
        "#!/bin/sh\nhello\nrun\ncat $HAL_ARTIFACT_BUNDLE/data/table.csv\n"
        "[ -x $HAL_ARTIFACT_HELLO ] && echo file\n"
    )
    fetched = _agent_downloads(server)
    state, out = _run(
        server, tmp_path, script, "-w", "node2", "--artifact=hello", "--artifact=bundle"
    )
    assert state == "COMPLETED", out
    assert out.splitlines() == ["hello from a single file", "zip run", "a,b", "file"]
    before = _copies(server, "node2")
    state, again = _run(server, tmp_path, script, "-w", "node2", "--artifact=hello,bundle@2024.1")
    assert (state, again) == ("COMPLETED", out)
    assert _copies(server, "node2") == before  # the same copies: no second fetch
    assert _agent_downloads(server) == fetched + 2  # the server counts the two fetches
    left = (server.data_dir / "agents" / "node2" / "artifacts").glob(".*.part")
    assert not list(left)  # no download left behind


def test_content_that_cannot_be_fetched_fails_the_launch_saying_why(
    server: LiveServer, tmp_path: Path
) -> None:
    with server.client() as c:
        sha = c.push_artifact(
            "lost", "1", tmp_path.joinpath("f").write_bytes(b"x" * 100) and tmp_path / "f"
        )[0].sha256
    store = SqlStateStore(server.db_url)  # the pieces lost behind the server's back
    try:
        with store.engine.begin() as conn:
            conn.execute(delete(schema.artifact_blobs).where(schema.artifact_blobs.c.sha256 == sha))
    finally:
        store.close()
    state, out = _run(server, tmp_path, "#!/bin/sh\necho ran\n", "-w", "node1", "--artifact=lost")
    assert state == "FAILED" and "ran" not in out
    with server.client() as c:
        (job,) = [
            j for j in c.jobs(states=["FAILED"], include_finished=True) if j.artifacts == ["lost@1"]
        ]
        assert job.reason == "JobLaunchFailure"
        (ended,) = [
            e for e in c.events(0, follow=False) if e.job_id == job.id and "message" in e.data
        ]
    assert ended.data["message"].startswith(f"cannot launch job {job.id} on node1: artifact: ")
    assert "lost@1 is missing from the database" in ended.data["message"]
    # hal explain says why it never started, beyond Slurm's bare JobLaunchFailure
    explained = server.cli("explain", str(job.id)).stdout
    assert "it never started: cannot launch job" in explained
    assert "missing from the database" in explained


def test_a_cut_off_archive_fails_the_job_and_frees_the_node(
    server: LiveServer, tmp_path: Path
) -> None:
    """(The agent's deploy task died on the decompressor's EOFError: the job hung RUNNING,
    and after scancel COMPLETING, holding its CPUs.)"""
    whole = _tarball(tmp_path / "whole.tgz", {"t/bin/t": os.urandom(20_000)}).read_bytes()
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(whole[:200])
    with server.client() as c:
        c.push_artifact("cut", "1", cut)
    state, _ = _run(server, tmp_path, "#!/bin/sh\necho ran\n", "-w", "node1", "--artifact=cut")
    assert state == "FAILED"
    explained = server.cli("explain", "--json", str(_last_job(server))).stdout
    assert "cannot unpack it" in explained
    state, out = _run(server, tmp_path, "#!/bin/sh\necho ran\n", "-w", "node1")
    assert (state, out) == ("COMPLETED", "ran\n")  # the node is free


def test_a_job_without_the_submitters_environment_keeps_the_default_path(
    server: LiveServer, tmp_path: Path
) -> None:
    """(--export=NONE: PATH held only the artifacts' folders: no ls, no hostname.)"""
    program = tmp_path / "greet"
    program.write_text("#!/bin/sh\necho greetings\n")
    with server.client() as c:
        c.push_artifact("greet", "1", program)
    script = "#!/bin/sh\ngreet\nls / > /dev/null && echo ls-found\n"
    state, out = _run(server, tmp_path, script, "--export=NONE", "--artifact=greet")
    assert (state, out) == ("COMPLETED", "greetings\nls-found\n")


def test_the_other_nodes_fetch_a_jobs_artifacts_when_it_starts(
    server: LiveServer, tmp_path: Path
) -> None:
    """The second node holds its copy while the batch script still sleeps, before any
    srun: the first step there does not wait for the fetch."""
    program = tmp_path / "early"
    program.write_bytes(b"#!/bin/sh\necho early\n" + os.urandom(1000))
    with server.client() as c:
        sha = c.push_artifact("early", "1", program)[0].sha256
    (tmp_path / "job.sh").write_text("#!/bin/sh\nsleep 3\n")
    done = server.cli("sbatch", "--parsable", "-N2", "--artifact=early", "job.sh", cwd=tmp_path)
    job_id = done.stdout.strip()
    with server.client() as c:
        wait_until(lambda: c.job(job_id).state == "RUNNING", 10, message="the job to start")
        other = c.job(job_id).nodes[1]  # (the first is the batch node)
        wait_until(lambda: f"{sha}.program" in _copies(server, other), 10, message="its copy there")
        assert c.job(job_id).state == "RUNNING"
