"""Instructions to an agent are numbered and resent until the agent says it applied them:
a lost reply lost its `Signal` or `Limit` for good (only launches were resent), and a
reply that overtook an older one (two syncs in flight) delivered a signal before the
launch it was for, which the agent then dropped."""

from __future__ import annotations

from typing import Any

from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobUpdate
from hal.wire.submit import JobSubmit

SCRIPT = "#!/bin/sh\nsleep 600\n"


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.token}"}
    r = http.post(live.url + path, json=body, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def register(live: LiveServer, node: str, running: list[dict[str, int]] | None = None) -> int:
    body = {"node": node, "cpus": 2, "memory_bytes": 2**31, "running": running or []}
    first: int = post(live, "/v1/agent/register", body)["instructions_from"]
    return first


def sync(live: LiveServer, node: str, **body: Any) -> tuple[int, list[str]]:
    reply = post(live, f"/v1/agent/{node}/sync", {"wait_seconds": 0, **body})
    return reply["first_id"], [i["op"] for i in reply["instructions"]]


def launched(live: LiveServer, node: str, applied: int) -> None:
    wait_until(lambda: bool(sync(live, node, applied=applied)[1]), message=f"a launch on {node}")


def test_instructions_come_again_until_the_agent_says_it_applied_them(
    each_store: LiveServer,
) -> None:
    first = register(each_store, "n1")
    assert first > 0
    with each_store.client() as admin:
        job = admin.submit(JobSubmit(script=SCRIPT, nodelist=["n1"])).job_id
        launched(each_store, "n1", first - 1)
        # that reply was lost: nothing applied, so the launch comes again, same number
        assert sync(each_store, "n1", applied=first - 1) == (first, ["launch"])
        admin.cancel(job, signal=10)
        assert sync(each_store, "n1", applied=first - 1) == (first, ["launch", "signal"])
        # the agent applied the launch: the signal comes alone, under the next number
        assert sync(each_store, "n1", applied=first) == (first + 1, ["signal"])
        assert sync(each_store, "n1", applied=first + 1) == (first + 2, [])


def test_an_agent_that_does_not_number_gets_each_instruction_once(
    each_store: LiveServer,
) -> None:
    register(each_store, "n1")
    with each_store.client() as admin:
        admin.submit(JobSubmit(script=SCRIPT, nodelist=["n1"]))
        wait_until(lambda: bool(sync(each_store, "n1")[1]), message="the launch")
        assert sync(each_store, "n1")[1] == []


def test_a_new_time_limit_not_applied_survives_the_agents_registration(
    each_store: LiveServer,
) -> None:
    """The agent restarted before it applied a `scontrol update TimeLimit=`: its new
    session brings the limit (a signal is not carried: the old agent may have sent it)."""
    first = register(each_store, "n1")
    with each_store.client() as admin:
        job = admin.submit(JobSubmit(script=SCRIPT, nodelist=["n1"], time_limit_seconds=3600))
        launched(each_store, "n1", first - 1)
        started = {"seq": 1, "job_id": job.job_id, "attempt": 0, "kind": "started", "time": 1.0}
        sync(each_store, "n1", applied=first, reports=[started], running=[job.job_id])
        admin.update_job(job.job_id, JobUpdate(time_limit_seconds=600))
        admin.cancel(job.job_id, signal=10)
        running = [{"job_id": job.job_id, "attempt": 0, "pid": 1}]
        again = register(each_store, "n1", running)
        assert again > first + 2
        assert sync(each_store, "n1", applied=again - 1, running=[job.job_id]) == (
            again,
            ["limit"],
        )
