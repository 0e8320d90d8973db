"""Python environments on real agents, the forms beyond sbatch's lock
(docs/user/environments.md): a conda environment packed with conda-pack and published as
an artifact (``--python-env=NAME@VERSION``) is unpacked and relocated on each node the
job runs on, and its batch script and steps run with its Python; what is no conda-pack
archive fails the job saying how to make one, and an artifact that is not an archive is
refused at submission; ``salloc --python-env`` and ``srun --python-env`` outside a job
give the allocation's steps the environment, and a step inside a job takes its job's."""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client.artifacts import file_sha256
from hal.core.pyenv import make_python_env
from hal.testing.conda_pack import make_conda_pack
from hal.testing.live import LiveServer, wait_until
from hal.testing.wheels import make_wheel

SRUN = (sys.executable, "-m", "hal.cli.main", "srun")  # (not Slurm's, if installed)
PREFIX = "import sys; print(sys.prefix)"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hal")
    wheels = tmp / "wheels"
    make_wheel(wheels, "halpkga", "1.0")
    index = {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels)}
    with LiveServer(tmp) as live:
        for name in ("node1", "node2"):
            live.start_agent(name, cpus=2, env=index)
        with live.client() as c:
            wait_until(
                lambda: {"node1", "node2"} <= {n.name for n in c.nodes() if n.state == "UP"},
                message="agents to register",
            )
        yield live


@pytest.fixture(scope="module")
def condaenv(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``condaenv@1`` published: its archive's sha256."""
    tmp = tmp_path_factory.mktemp("conda")
    archive = make_conda_pack(tmp / "build", tmp / "condaenv.tar.gz")
    done = server.cli("artifact", "push", "condaenv@1", str(archive))
    assert done.returncode == 0, done.stderr
    return file_sha256(archive)


def _submit(live: LiveServer, folder: Path, script: str, *args: str) -> str:
    (folder / "job.sh").write_text(script)
    done = live.cli("sbatch", "--parsable", *args, "job.sh", cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ended(live: LiveServer, job_id: str) -> str:
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state not in ("PENDING", "RUNNING"), 120, message="end")
        return c.job(job_id).state


def _prefix(live: LiveServer, node: str, sha256: str) -> Path:
    return live.data_dir / "agents" / node / "artifacts" / f"{sha256}.conda" / "env"


def test_a_conda_pack_environment_runs_the_script_and_its_steps(
    server: LiveServer, condaenv: str, tmp_path: Path
) -> None:
    srun = " ".join(SRUN)
    script = (
        "#!/bin/sh\n#HAL --python-env=condaenv@1\n"
        f"python -c '{PREFIX}'\nhalhello\n"
        f"{srun} -l python -c '{PREFIX}'\n"
    )
    job = _submit(server, tmp_path, script, "-N2", "-n2", "-o", "out.txt")
    out = tmp_path / "out.txt"
    assert _ended(server, job) == "COMPLETED", out.read_text() if out.exists() else ""
    first = _prefix(server, "node1", condaenv)
    lines = out.read_text().splitlines()
    assert lines[0] == str(first)
    assert lines[1] == f"hello from {first} {first}/share/halconda"  # relocated in place
    assert sorted(lines[2:]) == [f"0: {first}", f"1: {_prefix(server, 'node2', condaenv)}"]
    with server.client() as c:
        shown = c.job(job)
        assert shown.python_env == "conda:condaenv@1"
        assert f"condaenv@1={condaenv}" in shown.artifact_digests
    assert "PythonEnv=conda:condaenv@1" in server.cli("scontrol", "show", "job", job).stdout
    assert (first.parent / "ready").exists()


def test_what_is_no_conda_pack_archive_fails_the_job_saying_how_to_make_one(
    server: LiveServer, tmp_path: Path
) -> None:
    archive = tmp_path / "tools.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("bin/tool")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"hi\n"))
    assert server.cli("artifact", "push", "tools@1", str(archive)).returncode == 0
    args = ("-w", "node1", "--python-env=tools@1", "-o", "out.txt", "-e", "err.txt")
    job = _submit(server, tmp_path, "#!/bin/sh\necho ran\n", *args)
    assert _ended(server, job) == "FAILED"
    error = (tmp_path / "err.txt").read_text()
    assert "tools@1 is not a conda-pack archive (it has no bin/conda-unpack)" in error
    assert "conda pack -n ENV -o env.tar.gz" in error
    reason = server.cli("sacct", "-j", job, "-X", "-n", "-P", "-o", "State,Reason")
    assert reason.stdout.split() == ["FAILED|JobLaunchFailure"], reason


def test_a_program_or_a_missing_version_is_refused_at_submission(
    server: LiveServer, tmp_path: Path
) -> None:
    program = tmp_path / "prog"
    program.write_text("#!/bin/sh\necho hi\n")
    assert server.cli("artifact", "push", "prog@1", str(program)).returncode == 0
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    done = server.cli("sbatch", "--python-env=prog@1", "job.sh", cwd=tmp_path)
    assert done.returncode != 0
    assert "is a program, not a conda-pack archive" in done.stderr, done.stderr
    done = server.cli("sbatch", "--python-env=nosuchenv@1", "job.sh", cwd=tmp_path)
    assert done.returncode != 0 and "no artifact 'nosuchenv'" in done.stderr, done.stderr


def test_salloc_and_srun_outside_a_job_take_a_lock(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("halpkga==1.0  # allocations\n")
    sha = make_python_env({"requirements.txt": "halpkga==1.0  # allocations\n"}).sha256
    show = "import halpkga, os; print(halpkga.VERSION, os.environ['HAL_PYTHON_ENV'][:8])"
    done = server.cli(
        "srun", "-N2", "-l", "--python-env=requirements.txt", "python", "-c", show, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"0: 1.0 {sha[:8]}", f"1: 1.0 {sha[:8]}"]
    argv = ("salloc", "-N1", "--python-env=requirements.txt", *SRUN, "python", "-c", show)
    done = server.cli(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.0", sha[:8]]


def test_a_step_takes_its_jobs_environment_and_cannot_name_another(
    server: LiveServer, condaenv: str, tmp_path: Path
) -> None:
    srun = " ".join(SRUN)
    script = (
        f"#!/bin/sh\n{srun} python -c '{PREFIX}'\n"
        f"{srun} --python-env=condaenv@1 true || echo refused\n"
    )
    args = ("--python-env=condaenv@1", "-w", "node2", "-o", "out.txt", "-e", "err.txt")
    job = _submit(server, tmp_path, script, *args)
    assert _ended(server, job) == "COMPLETED", (tmp_path / "err.txt").read_text()
    lines = (tmp_path / "out.txt").read_text().splitlines()
    assert lines == [str(_prefix(server, "node2", condaenv)), "refused"]
    assert "with the job's --python-env and --container" in (tmp_path / "err.txt").read_text()
