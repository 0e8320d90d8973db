"""A job moved off a clashing neighbour end to end, on two real agents: a service that
reports its rate with ``hal.feedback.report`` shares a node with a job that fills its
memory (the only node a rigid job left them; it has ended since). The interference
model, kept from before in the server's data directory, says memory work slows the
service's kind of work 1.6x. Once the agents' samples have classed both jobs and the
service's rate falls and stays down, the feedback loop requeues the neighbour (it may
be requeued and has the lower priority; the service may not be), with a preferred
``--apart`` rule: it runs again on the other node, and the service runs on where it was.
The move is a ``job.moved`` event with its reason, ``hal show`` says it, and
``hal_jobs_moved_total`` counts it on /metrics."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.harmonic import HarmonicConfig
from hal.core.dissonance import DissonanceModel, Outcome
from hal.core.profiles import CPU, LIGHT, MEMORY
from hal.server.dissonance import FILE
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobEvent

PY = sys.executable
HIGH, LOW = 20, 120  # reports at the service's own pace, then slowed


def learnt_model() -> dict[str, object]:
    """What the server would have kept after seeing memory work slow light and cpu work
    (the service is light here; cpu if a loaded host makes its reports busy)."""
    model = DissonanceModel()
    for victim in (LIGHT, CPU):
        for _ in range(50):
            model.observe(Outcome(victim, {MEMORY: 1.0}, 1.6, biased=False))
    return {"model": model.export(), "checked": [], "identities": {}}


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Two agents of 2 CPUs; the feedback loop looks every second. A fresh server for each
    try: a rerun on the first one would find its jobs still on node1 and its move counted."""
    data = tmp_path_factory.mktemp("move")
    (data / FILE).parent.mkdir(parents=True)
    (data / FILE).write_text(json.dumps(learnt_model()))
    loop = HarmonicConfig(feedback_tick_s=1.0)
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2, "harmonic": loop}) as srv,
        srv.agents(2, cpus=2, memory="1G"),
    ):
        yield srv


def test_a_fallen_service_has_its_clashing_neighbour_moved(
    server: LiveServer, tmp_path: Path
) -> None:
    with server.client() as c:
        cells = {(x.victim, x.aggressor): x.slowdown for x in c.harmonic_dissonance().cells}
    assert cells[LIGHT, MEMORY] > 1.5  # the kept model

    def state(job_id: int) -> str:
        with server.client() as c:
            return c.job(job_id).state

    blocker = server.cli(
        "sbatch", "--parsable", "-n", "2", "--mem=100M", "-w", "node2", "--wrap", "sleep 300",
        cwd=tmp_path,
    )  # fmt: skip
    assert blocker.returncode == 0, blocker.stderr
    blocker_id = int(blocker.stdout)
    wait_until(lambda: state(blocker_id) == "RUNNING", message="the rigid job")
    service = tmp_path / "service.sh"
    service.write_text(
        "#!/bin/bash\n"
        "#SBATCH -n 1 --mem=100M --no-requeue\n"
        "#HAL --feedback-goal=rate:max\n"
        f"exec {PY} -c '\n"
        "import time\n"
        "from hal.feedback import report\n"
        f"for i in range({HIGH + LOW}):\n"
        f"    report(rate=100.0 if i < {HIGH} else 50.0)\n"
        "    time.sleep(1)\n"
        "'\n"
    )
    neighbour = tmp_path / "neighbour.sh"
    neighbour.write_text(
        "#!/bin/bash\n"
        "#SBATCH -n 1 --mem=384M --requeue --nice=100 --open-mode=append\n"
        'echo "run on $SLURMD_NODENAME"\n'
        "trap 'echo checkpoint; exit 0' USR1\n"
        f"{PY} -c '\n"
        "import time\n"
        "held = bytearray(320 << 20)\n"
        "for i in range(0, len(held), 4096):\n"
        "    held[i] = 1\n"
        "time.sleep(600)\n"
        "' &\n"
        "wait $!\n"
    )
    submitted = [
        server.cli("sbatch", "--parsable", str(s), cwd=tmp_path) for s in (service, neighbour)
    ]
    assert all(s.returncode == 0 for s in submitted), [s.stderr for s in submitted]
    service_id, noisy_id = (int(s.stdout) for s in submitted)
    # (the two start within seconds alone; CI's run beside the trace replays took longer)
    try:
        wait_until(lambda: state(service_id) == state(noisy_id) == "RUNNING", 90)
    except TimeoutError:
        with server.client() as c:
            seen = [c.job(i) for i in (blocker_id, service_id, noisy_id)]
        shown = [(j.id, j.state, j.reason, j.nodes, j.exit_code) for j in seen]
        raise AssertionError(f"the two jobs did not both run in 90 s: {shown}") from None
    with server.client() as c:
        assert c.job(service_id).nodes == c.job(noisy_id).nodes == ["node1"]
        c.cancel(blocker_id)  # (room elsewhere now: running jobs stay where they are)

        def moves() -> list[JobEvent]:
            return [e for e in c.events(follow=False) if e.kind == "job.moved"]

        wait_until(lambda: bool(moves()), timeout=HIGH + LOW / 2, message="the move")
        found = moves()
        assert len(found) == 1, [(e.job_id, e.data) for e in found]
        event = found[0]
        assert event.job_id == noisy_id and event.data["away_from"] == service_id, event
        reason = str(event.data["reason"])
        assert "fell and stayed down" in reason and f"job {noisy_id} moved" in reason, reason
        classes = (c.job(service_id).profile_class, c.job(noisy_id).profile_class)
        assert classes[1] == MEMORY and classes[0] in (LIGHT, CPU), classes

        def ran_again() -> bool:
            # (one read: two could see the first run still RUNNING, then the requeue's
            # restart count, with the job pending between its runs)
            job = c.job(noisy_id)
            return job.state == "RUNNING" and job.restarts == 1

        wait_until(ran_again, timeout=60, message="the moved job to run again")
        moved, stayed = c.job(noisy_id), c.job(service_id)
        assert moved.nodes == ["node2"], moved.nodes  # away from the service
        assert (stayed.state, stayed.nodes, stayed.restarts) == ("RUNNING", ["node1"], 0)
        assert moved.feedback_action is not None and "moved" in moved.feedback_action
        partition = moved.partition
    metrics = http.get(server.url + "/metrics", timeout=10).text
    assert f'hal_jobs_moved_total{{partition="{partition}",reason="dissonance"}} 1.0' in metrics
    shown = server.cli("show", str(noisy_id))
    assert "FeedbackAction=" in shown.stdout and "moved" in shown.stdout, shown.stdout
    out = (tmp_path / f"slurm-{noisy_id}.out").read_text()
    assert "run on node1" in out and "checkpoint" in out and "run on node2" in out, out
