"""The server's reaction to an interruption notice an agent sends (``AgentSync.notices``),
on a real control plane, spoken to over the agent protocol: the node drained at once, a
``--signal`` job signalled and given its grace, then requeued keeping its place with its
run recorded PREEMPTED and interrupted; a ``--no-requeue`` job ended NODE_FAIL, as a
node failure ends it; one event; a second notice changes nothing."""

from __future__ import annotations

import time
from typing import Any

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

SCRIPT = "#!/bin/sh\nsleep 600\n"


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.post(live.url + path, json=body, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


class Agent:
    """The agent protocol spoken by hand for node ``name``: what it was told, in order."""

    def __init__(self, live: LiveServer, name: str) -> None:
        self.live, self.name, self.seq = live, name, 0
        body = {"node": name, "cpus": 2, "memory_bytes": 2**31, "running": []}
        self.applied = post(live, "/v1/agent/register", body)["instructions_from"] - 1
        self.told: list[dict[str, Any]] = []

    def sync(self, **body: Any) -> list[dict[str, Any]]:
        reply = post(
            self.live,
            f"/v1/agent/{self.name}/sync",
            {"wait_seconds": 0, "applied": self.applied, **body},
        )
        fresh = [
            i for n, i in enumerate(reply["instructions"], reply["first_id"]) if n > self.applied
        ]
        self.applied = max(self.applied, reply["first_id"] + len(reply["instructions"]) - 1)
        self.told += fresh
        return fresh

    def report(self, job: int, kind: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"seq": self.seq, "job_id": job, "attempt": 0, "kind": kind, **fields}

    def wait_for(self, op: str, job: int, **body: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            self.sync(**body)
            return next((i for i in self.told if i["op"] == op and i["job_id"] == job), None)

        wait_until(lambda: found() is not None, timeout=20, message=f"{op} for job {job}")
        got = found()
        assert got is not None
        return got


def test_a_notice_drains_the_node_and_moves_its_jobs(tmp_path: Any) -> None:
    with LiveServer(tmp_path, config_overrides={"kill_wait_seconds": 1}) as live:
        agent = Agent(live, "spot1")
        with live.client() as admin:
            signalled = admin.submit(
                JobSubmit(script=SCRIPT, nodelist=["spot1"], signal="USR1@2", cpus_per_task=1)
            ).job_id
            plain = admin.submit(
                JobSubmit(script=SCRIPT, nodelist=["spot1"], requeue=False, cpus_per_task=1)
            ).job_id
            for job in (signalled, plain):
                agent.wait_for("launch", job)
            started = time.time()
            reports = [agent.report(j, "started", time=started) for j in (signalled, plain)]
            running = [signalled, plain]
            agent.sync(reports=reports, running=running)
            before = admin.job(signalled)
            assert before.state == "RUNNING"

            goes = float(int(time.time() + 120))
            notice = {"kind": "interruption", "action": "terminate", "time": goes}
            told = agent.sync(running=running, notices=[notice])

            node = admin.node("spot1")
            clock = time.strftime("%H:%M:%S", time.gmtime(goes))
            assert node.state == "DRAIN"
            assert node.reason == f"cloud: spot interruption at {clock}"
            # the --signal job is sent its signal now; the other is ended at once
            assert {"op": "signal", "job_id": signalled, "signal": 10, "batch_only": False} in [
                {k: i[k] for k in ("op", "job_id", "signal", "batch_only")}
                for i in told
                if i["op"] == "signal"
            ]
            cancel = next(i for i in told if i["op"] == "cancel")
            assert (cancel["job_id"], cancel["state"]) == (plain, "NODE_FAIL")
            assert admin.job(signalled).state == "RUNNING"  # its grace: time to checkpoint

            # after its 2 s the --signal job is ended, to come back to the queue
            ended = agent.wait_for("cancel", signalled, running=running)
            assert ended["state"] == "PENDING"
            stop = time.time()
            finished = [
                agent.report(signalled, "finished", time=stop, state="PENDING", exit_signal=15),
                agent.report(plain, "finished", time=stop, state="NODE_FAIL", exit_signal=15),
            ]
            agent.sync(reports=finished, running=[])

            again = admin.job(signalled)
            assert (again.state, again.restarts, again.requeued_after) == (
                "PENDING",
                1,
                "PREEMPTED",
            )
            assert again.submit_time == before.submit_time  # its place in the queue
            lost = admin.job(plain)
            assert lost.state == "NODE_FAIL" and lost.interrupted_at is not None
            assert lost.lost_work_seconds is not None
            assert abs(lost.lost_work_seconds - (stop - started)) < 1.5

            kinds = [e for e in admin.events(0, follow=False) if e.kind == "cloud.interrupted"]
            assert len(kinds) == 1 and kinds[0].node == "spot1"
            assert kinds[0].data["jobs"] == [signalled, plain]
            assert kinds[0].data["time"] == goes and kinds[0].data["action"] == "terminate"

            # the agent sends it once more (a lost reply): nothing changes
            agent.sync(running=[], notices=[notice])
            kinds = [e for e in admin.events(0, follow=False) if e.kind == "cloud.interrupted"]
            assert len(kinds) == 1

        # sacct -D: the earlier run PREEMPTED and interrupted, with the work it lost
        done = live.cli(
            "sacct", "-D", "-X", "-n", "-P", "-j", str(signalled),
            "-o", "State,Interrupted,LostWork",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        first, latest = done.stdout.strip().splitlines()
        state, interrupted, lost_work = first.split("|")
        assert state == "PREEMPTED" and interrupted and lost_work
        assert latest.split("|")[0] == "PENDING" and latest.split("|")[1:] == ["", ""]


def test_a_rebalance_recommendation_only_drains(tmp_path: Any) -> None:
    with LiveServer(tmp_path) as live:
        agent = Agent(live, "spot2")
        with live.client() as admin:
            job = admin.submit(JobSubmit(script=SCRIPT, nodelist=["spot2"])).job_id
            agent.wait_for("launch", job)
            agent.sync(reports=[agent.report(job, "started", time=time.time())], running=[job])
            noticed = float(int(time.time()))
            told = agent.sync(running=[job], notices=[{"kind": "rebalance", "time": noticed}])
            assert told == []
            node = admin.node("spot2")
            assert node.state == "DRAIN" and node.reason.startswith("cloud: rebalance recommended")
            assert admin.job(job).state == "RUNNING"
