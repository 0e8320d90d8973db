"""Running steps outlive a server restart (ADR 0012): the server keeps them in the
database, a restarted one takes them up before any agent registers, and agents that
register again with their step tasks keep them — a control-plane restart must not kill
an MPI job's ``srun`` tasks, as a slurmctld restart does not. A node's end that came
before the restart still counts, and a step whose job ended while its agent was away is
ended by that agent when it registers."""

from __future__ import annotations

import base64
from typing import Any

from agent_by_hand import ops, post, register

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit


def step_end(live: LiveServer, node: str, job: int, code: int, output: bytes = b"") -> None:
    chunk = {"job_id": job, "step_id": 0, "rank": 0 if node == "n1" else 1, "stream": "stdout"}
    body: dict[str, Any] = {
        "wait_seconds": 0,
        "step_ends": [{"job_id": job, "step_id": 0, "exit_code": code}],
    }
    if output:  # sent from offset 100: what the earlier server took is not sent again
        chunk.update(offset=100, data_b64=base64.b64encode(output).decode())
        body["step_output"] = [chunk]
    post(live, f"/v1/agent/{node}/sync", body)


def page(live: LiveServer, job: int, after: int = 0) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.token}"}
    url = f"{live.url}/v1/jobs/{job}/steps/0/output?after={after}"
    r = http.get(url, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def running_job_with_step(live: LiveServer) -> int:
    for node in ("n1", "n2"):
        register(live, node, [])
    with live.client() as admin:
        job = admin.submit(JobSubmit(script="#!/bin/sh\nsleep 600\n", nodes_min=2)).job_id
    wait_until(lambda: "launch" in ops(live, "n1"), message="the launch on n1")
    started = {"seq": 1, "job_id": job, "attempt": 0, "kind": "started", "time": 1.0}
    post(live, "/v1/agent/n1/sync", {"wait_seconds": 0, "reports": [started]})
    post(live, f"/v1/jobs/{job}/steps", {"argv": ["sleep", "600"]})
    return job


def running_one_node_job(live: LiveServer) -> int:
    """A one-node job running on n1, whose agent said it started."""
    register(live, "n1", [])
    with live.client() as admin:
        job = admin.submit(JobSubmit(script="#!/bin/sh\nsleep 600\n")).job_id
    wait_until(lambda: "launch" in ops(live, "n1"), message="the launch on n1")
    started = {"seq": 1, "job_id": job, "attempt": 0, "kind": "started", "time": 1.0}
    post(live, "/v1/agent/n1/sync", {"wait_seconds": 0, "reports": [started]})
    return job


def restart(live: LiveServer) -> None:
    live.stop()
    live.start()  # same database, same port


def test_a_running_step_is_taken_up_by_a_restarted_server(each_store: LiveServer) -> None:
    live = each_store
    job = running_job_with_step(live)
    step_end(live, "n1", job, 4)  # n1's part ends before the restart
    restart(live)
    before = page(live, job)
    assert before["state"] == "RUNNING" and before["chunks"] == []
    assert register(live, "n2", [(job, 0)]) == []  # its tasks run on: kept
    assert register(live, "n1", []) == []  # its part ended before: not lost
    step_end(live, "n2", job, 0, output=b"late line\n")
    # srun's cursor from the earlier server (500) must not hide the new server's output
    after = page(live, job, after=500)
    assert after["state"] == "FAILED" and after["exit_code"] == 4, after
    text = "".join(base64.b64decode(c["data_b64"]).decode() for c in after["chunks"])
    assert text == "late line\n"
    acct = live.cli("sacct", "-j", f"{job}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    assert acct.stdout.strip() == f"{job}.0|FAILED|4:0", acct.stdout + acct.stderr


def test_a_step_whose_job_ended_while_its_agent_was_away_is_ended_by_it(
    each_store: LiveServer,
) -> None:
    live = each_store
    job = running_job_with_step(live)
    assert "step_launch" in ops(live, "n2")
    restart(live)
    register(live, "n1", [(job, 0)])
    with live.client() as admin:
        admin.cancel(job)  # n2 has not registered with the new server yet
    assert register(live, "n2", [(job, 0)]) == [[job, 0]]  # its agent ends the tasks
    step_end(live, "n1", job, 143)
    step_end(live, "n2", job, 143)
    assert page(live, job)["state"] == "CANCELLED"


def test_a_local_step_is_taken_up_by_a_restarted_server(each_store: LiveServer) -> None:
    """srun running a step on the batch node (``srun ./a &`` in a one-node job) while the
    server restarts: the new server still shows it running, still holds the job's CPU
    for it (the next plain srun waits: 409), gives the next srun the next id (not the
    running step's), does not end it when the batch node's agent registers without it
    (srun holds its tasks), and takes srun's end report for it."""
    live = each_store
    job = running_one_node_job(live)
    local = {"argv": ["./a"], "local": True, "nodelist": ["n1"], "ntasks": 1}
    assert post(live, f"/v1/jobs/{job}/steps", local)["step_id"] == 0
    restart(live)
    assert register(live, "n1", []) == []
    with live.client() as c:
        running = [(s.step_id, s.local, s.state) for s in c.running_steps()]
    assert running == [(0, True, "RUNNING")], running
    auth = {"Authorization": f"Bearer {live.token}"}
    busy = http.post(f"{live.url}/v1/jobs/{job}/steps", json=local, headers=auth, timeout=30)
    assert busy.status_code == 409 and "Requested nodes are busy" in busy.text, busy.text
    beside = {**local, "overlap": True}
    assert post(live, f"/v1/jobs/{job}/steps", beside)["step_id"] == 1
    ended = post(live, f"/v1/jobs/{job}/steps/0/end", {"exit_code": 3})
    assert ended["state"] == "FAILED", ended
    acct = live.cli("sacct", "-j", f"{job}.0", "-n", "-P", "-o", "JobID,State,ExitCode")
    assert acct.stdout.strip() == f"{job}.0|FAILED|3:0", acct.stdout + acct.stderr


def instructions(live: LiveServer, node: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = post(live, f"/v1/agent/{node}/sync", {"wait_seconds": 0})[
        "instructions"
    ]
    return found


def test_a_cancelled_step_is_killed_again_by_a_restarted_server(each_store: LiveServer) -> None:
    """``scancel JOB.STEP`` and the server restarts before the agents had the kill: the
    new server sends it again to each agent that registers holding the step (SIGKILL,
    with the cancel's time, for slurmstepd's line), srun still learns it was cancelled,
    and it ends CANCELLED."""
    live = each_store
    job = running_job_with_step(live)
    assert "step_launch" in ops(live, "n2")
    cancelled = post(live, f"/v1/jobs/{job}/steps/0/cancel", {})["cancelled_at"]
    assert isinstance(cancelled, float)
    restart(live)  # neither agent synced since: the kills went nowhere
    assert page(live, job)["cancelled_at"] == cancelled  # srun's "Job step aborted"
    for node in ("n1", "n2"):
        assert register(live, node, [(job, 0)]) == []  # not left to a plain SIGTERM
        kills = [i for i in instructions(live, node) if i["op"] == "step_signal"]
        assert [(k["job_id"], k["step_id"], k["signal"], k["cancelled_at"]) for k in kills] == [
            (job, 0, 9, cancelled)
        ], kills
        step_end(live, node, job, 137)
    assert page(live, job)["state"] == "CANCELLED"
    with live.client() as admin:
        assert admin.job(job).state == "RUNNING"  # the job goes on


def test_a_cancelled_local_step_is_killed_again_by_a_restarted_server(
    each_store: LiveServer,
) -> None:
    """The same for a step srun runs on the batch node: the batch node's agent, on
    registering with the new server, is told again to kill the step's cgroup."""
    live = each_store
    job = running_one_node_job(live)
    local = {"argv": ["./a"], "local": True, "nodelist": ["n1"], "ntasks": 1, "srun": "7:8"}
    assert post(live, f"/v1/jobs/{job}/steps", local)["step_id"] == 0
    cancelled = post(live, f"/v1/jobs/{job}/steps/0/cancel", {})["cancelled_at"]
    restart(live)
    assert register(live, "n1", []) == []
    kills = [i for i in instructions(live, "n1") if i["op"] == "step_signal"]
    assert [(k["signal"], k["local"], k["srun"], k["cancelled_at"]) for k in kills] == [
        (9, True, "7:8", cancelled)
    ], kills
    ended = post(live, f"/v1/jobs/{job}/steps/0/end", {"exit_code": 137, "exit_signal": 9})
    assert ended["state"] == "CANCELLED" and ended["cancelled_at"] == cancelled, ended
