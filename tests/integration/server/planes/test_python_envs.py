"""Python environments on real agents (docs/user/environments.md): ``--python-env``
builds the lock's environment on the node with uv from wheels made here (a find-links
folder, no index), the batch script and its steps run with it active, jobs with one lock
share one build, and a lock that does not resolve fails the job with the resolver's words
in its error file and ``JobLaunchFailure`` in sacct, without building again."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.core.pyenv import make_python_env
from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until
from hal.testing.wheels import make_wheel

SRUN = f"{sys.executable} -m hal.cli.main srun"
METRICS = {"node1": free_port(), "node2": free_port()}  # the agents' own /metrics


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hal")
    wheels = tmp / "wheels"
    make_wheel(wheels, "halpkga", "1.0")
    make_wheel(wheels, "halpkga", "2.0", body="def hello():\n    return 'hello from 2.0'\n")
    index = {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels)}
    with LiveServer(tmp) as live:
        for name in ("node1", "node2"):
            metrics = ["--metrics-listen", f"127.0.0.1:{METRICS[name]}"]
            live.start_agent(name, cpus=2, env=index, extra=metrics)
        with live.client() as c:
            wait_until(
                lambda: {"node1", "node2"} <= {n.name for n in c.nodes() if n.state == "UP"},
                message="agents to register",
            )
        yield live


def _submit(live: LiveServer, folder: Path, script: str, *args: str) -> str:
    (folder / "job.sh").write_text(script)
    done = live.cli("sbatch", "--parsable", *args, "job.sh", cwd=folder)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _ended(live: LiveServer, job_id: str) -> str:
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state not in ("PENDING", "RUNNING"), 120, message="end")
        return c.job(job_id).state


def _builds(node: str, result: str = "built") -> float:
    text = http.get(f"http://127.0.0.1:{METRICS[node]}/metrics", timeout=10).text
    found = re.search(
        rf'^hal_agent_python_env_builds_total\{{node="{node}",result="{result}"\}} (\S+)$',
        text,
        re.M,
    )
    assert found, text[-2000:]
    return float(found.group(1))


def test_the_batch_script_and_its_steps_run_in_the_environment(
    server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "requirements.txt").write_text("halpkga==2.0\n")
    script = (
        "#!/bin/sh\n#HAL --python-env=requirements.txt\n"
        'python -c "import halpkga; print(halpkga.hello())"\n'
        f"{SRUN} -l python -c \"import halpkga, os; print(os.environ['HAL_PYTHON_ENV'][:8])\"\n"
    )
    job = _submit(server, tmp_path, script, "-N2", "-n2", "-o", "out.txt")
    out = tmp_path / "out.txt"
    assert _ended(server, job) == "COMPLETED", out.read_text() if out.exists() else ""
    sha = make_python_env({"requirements.txt": "halpkga==2.0\n"}).sha256
    lines = out.read_text().splitlines()
    assert lines[0] == "hello from 2.0"
    assert sorted(lines[1:]) == [f"0: {sha[:8]}", f"1: {sha[:8]}"]
    with server.client() as c:
        assert c.job(job).python_env == f"requirements:{sha}"
    shown = server.cli("scontrol", "show", "job", job).stdout
    assert f"PythonEnv=requirements:{sha}" in shown
    for node in ("node1", "node2"):
        venv = server.data_dir / "agents" / node / "artifacts" / f"{sha}.venv"
        assert (venv / "ready").exists()


def test_jobs_with_the_same_lock_share_one_build(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "req.lock").write_text("halpkga==1.0  # shared\n")
    sha = make_python_env({"requirements.txt": "halpkga==1.0  # shared\n"}).sha256
    script = '#!/bin/sh\npython -c "import halpkga; print(halpkga.VERSION)"\n'
    before = _builds("node2")
    jobs = [
        _submit(server, tmp_path, script, "-w", "node2", "--python-env=req.lock", "-o", f"{i}.out")
        for i in range(3)
    ]
    assert [_ended(server, j) for j in jobs] == ["COMPLETED"] * 3
    assert [(tmp_path / f"{i}.out").read_text() for i in range(3)] == ["1.0\n"] * 3
    assert _builds("node2") == before + 1
    assert (server.data_dir / "agents" / "node2" / "artifacts" / f"{sha}.venv" / "ready").exists()


def test_a_lock_that_does_not_resolve_fails_the_job_saying_why_and_is_not_rebuilt(
    server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "requirements.txt").write_text("halpkga==9.9\n")
    args = ("-w", "node1", "--python-env=requirements.txt", "-o", "out.txt", "-e", "err.txt")
    job = _submit(server, tmp_path, "#!/bin/sh\necho ran\n", *args)
    assert _ended(server, job) == "FAILED"
    assert not (tmp_path / "out.txt").exists() or "ran" not in (tmp_path / "out.txt").read_text()
    error = (tmp_path / "err.txt").read_text()
    assert "could not be built" in error and "halpkga" in error and "9.9" in error
    reason = server.cli("sacct", "-j", job, "-X", "-n", "-P", "-o", "State,Reason")
    assert reason.stdout.split() == ["FAILED|JobLaunchFailure"], reason
    assert "python-env" in server.cli("explain", job).stdout
    # the same lock again fails at once with the remembered failure
    again = _submit(server, tmp_path, "#!/bin/sh\necho ran\n", *args[:-2], "-e", "again.txt")
    assert _ended(server, again) == "FAILED"
    assert "not tried again" in (tmp_path / "again.txt").read_text()
    assert _builds("node1", "failed") == 1  # the one build, not a second


def test_an_unpinned_lock_is_refused_at_submission(server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("halpkga>=1\n")
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    done = server.cli("sbatch", "--python-env=requirements.txt", "job.sh", cwd=tmp_path)
    assert done.returncode != 0
    assert "is not pinned to one version" in done.stderr
    missing = server.cli("sbatch", "--python-env=nowhere.txt", "job.sh", cwd=tmp_path)
    assert missing.returncode != 0 and "cannot read nowhere.txt" in missing.stderr


def test_over_rest_the_lock_files_are_a_field_and_a_wrong_set_is_refused(
    server: LiveServer, tmp_path: Path
) -> None:
    fields = {
        "script": '#!/bin/sh\npython -c "import halpkga; print(halpkga.VERSION)"\n',
        "workdir": str(tmp_path),
        "stdout": str(tmp_path / "rest.out"),
        "python_env": {"requirements.txt": "halpkga==1.0\n"},
    }
    with server.client() as c:
        job = c.submit_fields(fields)["job_id"]
        assert _ended(server, str(job)) == "COMPLETED"
        assert (tmp_path / "rest.out").read_text() == "1.0\n"
        wrong = {**fields, "python_env": {"setup.py": "x"}}
        refused = http.post(
            f"{server.url}/v1/jobs",
            json=wrong,
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=10,
        )
    assert refused.status_code == 400, refused.text
    assert "or {'artifact': 'NAME@VERSION'}" in refused.text


def test_the_benchmark_reports_a_cold_build_and_the_warm_overhead() -> None:
    from hal.bench.envs import run_envs_bench

    venv = run_envs_bench(jobs=2)["venv"]
    assert venv["cold_build_s"] > 0
    assert venv["plain_start_ms_p50"] > 0 and venv["warm_start_ms_p50"] > 0
    assert set(venv) >= {"warm_overhead_ms", "cold_build_s", "met", "goal_ms"}


def test_the_other_nodes_build_it_when_the_job_starts(server: LiveServer, tmp_path: Path) -> None:
    """node2 builds the environment while the batch script on node1 still sleeps, before
    any step asks for it there."""
    text = "halpkga==2.0  # ahead\n"
    (tmp_path / "requirements.txt").write_text(text)
    sha = make_python_env({"requirements.txt": text}).sha256
    script = f"#!/bin/sh\nwhile [ ! -e {tmp_path}/go ]; do sleep 0.1; done\n"
    job = _submit(server, tmp_path, script, "-N2", "--python-env=requirements.txt", "-o", "o")
    ready = server.data_dir / "agents" / "node2" / "artifacts" / f"{sha}.venv" / "ready"
    wait_until(ready.exists, 60, message="node2 to build the environment ahead")
    with server.client() as c:
        assert c.job(job).state == "RUNNING"
    (tmp_path / "go").touch()
    assert _ended(server, job) == "COMPLETED"
