"""A malleable job resized end to end by what it reports: on two real agents, a
``--malleable --nodes=1-2`` job starts on the one node a rigid job leaves it, reports
its rate with ``hal feedback``; once the rigid job ends, the feedback loop sees the
free node and a rate at its size, sends it SIGUSR1 (it has no ``--signal``) and
requeues it at 2 nodes, where it runs again. The resize is a ``job.resized`` event
with its reason, and ``hal show`` and ``hal explain`` say it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.harmonic import HarmonicConfig
from hal.testing.live import LiveServer, wait_until

PY = sys.executable


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Two agents of 2 CPUs; the feedback loop looks every second and may resize a job
    a second after it started."""
    loop = HarmonicConfig(feedback_tick_s=1.0, resize_interval_s=1.0)
    data = tmp_path_factory.mktemp("malleable")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2, "harmonic": loop}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def job_state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def test_reported_feedback_drives_a_resize(server: LiveServer, tmp_path: Path) -> None:
    blocker = server.cli("sbatch", "--parsable", "-n", "2", "--wrap", "sleep 300", cwd=tmp_path)
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = int(blocker.stdout)
    wait_until(lambda: job_state(server, blocker_id) == "RUNNING", message="the rigid job")
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --nodes=1-2 --ntasks-per-node=2 --open-mode=append\n"
        "#HAL --malleable --feedback-goal=rate:max\n"
        'echo "run on $SLURM_NNODES"\n'
        "trap 'echo \"checkpoint on $SLURM_NNODES\"; exit 0' USR1\n"
        'if [ "$SLURM_NNODES" = 2 ]; then\n'
        f"  {PY} -m hal.cli.main feedback rate=200 && exit 0\n"
        "fi\n"
        "for i in $(seq 60); do\n"
        f"  {PY} -m hal.cli.main feedback rate=100\n"
        "  sleep 1 & wait $!\n"
        "done\n"
    )
    done = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    wait_until(lambda: job_state(server, job_id) == "RUNNING", message="the malleable job")
    with server.client() as c:
        assert len(c.job(job_id).nodes) == 1  # all the rigid job left it
        wait_until(lambda: bool(c.job_feedback(job_id).metrics), message="its first report")
        assert [e for e in c.events(follow=False) if e.kind == "job.resized"] == []
        c.cancel(blocker_id)
        wait_until(
            lambda: any(e.kind == "job.resized" for e in c.events(follow=False)),
            timeout=20,
            message="the feedback loop to resize it",
        )
        (event,) = [e for e in c.events(follow=False) if e.kind == "job.resized"]
        assert event.job_id == job_id
        assert (event.data["from"], event.data["to"], event.data["unit"]) == (1, 2, "nodes")
        assert "speedup" in str(event.data["reason"])
        wait_until(
            lambda: job_state(server, job_id) == "COMPLETED", timeout=30, message="its 2-node run"
        )
        info = c.job(job_id)
        assert len(info.nodes) == 2 and info.restarts == 1
        assert info.malleable == "nodes=1-2"
        assert info.feedback_action is not None and "resized 1 → 2 nodes" in info.feedback_action
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert "run on 1" in out and "checkpoint on 1" in out and "run on 2" in out, out
    shown = server.cli("show", str(job_id))
    assert "Malleable=nodes=1-2" in shown.stdout, shown.stdout
    assert "FeedbackAction=" in shown.stdout and "resized 1 → 2" in shown.stdout
    explained = server.cli("explain", str(job_id))
    assert "feedback: " in explained.stdout and "resized 1 → 2" in explained.stdout
