"""``squeue`` asks a live server for only the fields its format reads
(``GET /v1/jobs?fields=``) and prints exactly what it prints with every field, for a
queue with running, pending, held, dependent, array and finished jobs, in several
formats; the REST list answers with just the fields named and refuses a name a job does
not have, saying which there are."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hal.api.job_list import SQUEUE_FIELDS, job_list_cache
from hal.api.list_warmer import WARM_EVERY_S
from hal.client import HalClient
from hal.compat.commands import run
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobInfo


class EveryField(HalClient):
    """A client that lists every field of each job whatever squeue asks for, as a
    server without ``fields=`` answers."""

    def jobs(self, **query: Any) -> list[JobInfo]:
        query.pop("fields", None)
        return super().jobs(**query)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"kill_wait_seconds": 2})
    with server, server.agents(1, cpus=2, memory="1G"):
        yield server


def _sbatch(server: LiveServer, cwd: Path, *args: str, wrap: str = "sleep 300") -> int:
    out = server.cli("sbatch", "--parsable", *args, "--wrap", wrap, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip().split(";")[0])


def _squeue(client: HalClient, now: float, *argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    rc = run(
        "squeue", list(argv), client_factory=lambda: client, stdout=out, stderr=err,
        clock=lambda: now,
    )  # fmt: skip
    assert rc == 0, err.getvalue()
    return out.getvalue()


FORMATS = [
    [],
    ["-l"],
    ["-t", "all"],
    ["-t", "all", "-o", "%all"],
    ["-t", "all", "-O", "JobID,Name,State,Reason,TimeUsed,NumNodes,NodeList,Dependency"],
    ["--start"],
    ["-S", "-p,i", "-o", "%i %p %Q %V %l %L"],
    ["-r", "-t", "PD,R"],
    ["-n", "arr", "-r"],
]


def test_squeue_prints_the_same_with_the_fields_it_asks_for(
    live: LiveServer, tmp_path: Path
) -> None:
    done = _sbatch(live, tmp_path, "-J", "quick", wrap="true")
    c = live.client()
    wait_until(lambda: c.job(done).state == "COMPLETED", message="the quick job to end")
    runner = _sbatch(live, tmp_path, "-c", "1", "-J", "runner")
    wait_until(lambda: c.job(runner).state == "RUNNING", message="the runner to start")
    queued = [
        _sbatch(live, tmp_path, "-c", "2", "-J", "arr", "--array", "1-4%2"),
        _sbatch(live, tmp_path, "-H", "-J", "held"),
        _sbatch(live, tmp_path, "-d", f"afterok:{runner}", "-J", "after"),
    ]
    some, every = live.client(), EveryField(live.url, live.token)
    now = time.time() + 5

    def same(*argv: str) -> str:
        """squeue's output with only its fields and with every one, taken back to back:
        a pass (reasons, a forecast slice's expected starts) may land between the two
        reads, so a difference is read again, a few times, before it counts."""
        for _ in range(20):
            asked = _squeue(some, now, *argv)
            if asked == _squeue(every, now, *argv):
                return asked
            time.sleep(0.25)
        assert asked == _squeue(every, now, *argv), argv
        return asked

    try:
        # every waiting job looked at by a pass once (its own reason, not the first)
        wait_until(
            lambda: all(j.reason != "WaitingForScheduling" for j in c.jobs(states=["PD"])),
            message="a pass to look at every waiting job",
        )
        for argv in FORMATS:
            asked = same(*argv)
            assert len(asked.splitlines()) >= 3, (argv, asked)
        same("-j", str(done))  # -j: one job, any state
    finally:
        for job_id in (runner, *queued):  # (a rerun finds the node free)
            c.cancel(str(job_id))


def test_the_list_sends_the_fields_named_and_refuses_unknown_ones(
    live: LiveServer, tmp_path: Path
) -> None:
    _sbatch(live, tmp_path, "-J", "listed", wrap="true")  # (a job of its own to list)
    auth = {"Authorization": f"Bearer {live.token}"}
    got = http.get(
        f"{live.url}/v1/jobs", params={"fields": "id,state", "all": "true"}, headers=auth
    )
    assert got.status_code == 200
    listed = got.json()["jobs"]
    assert listed and all(job.keys() == {"id", "state"} for job in listed)
    records = live.client().jobs(include_finished=True, validate=False, fields=["display_id"])
    assert records and all(vars(r).keys() == {"display_id"} for r in records)
    refused = http.get(f"{live.url}/v1/jobs", params={"fields": "id,colour"}, headers=auth)
    assert refused.status_code == 400
    problem = refused.json()
    assert "colour" in problem["detail"] and "display_id" in problem["detail"]
    history = http.get(
        f"{live.url}/v1/jobs", params={"fields": "id,steps", "history": "true"}, headers=auth
    )
    assert history.status_code == 200
    assert all(job.keys() == {"id", "steps"} for job in history.json()["jobs"])


def test_omit_defaults_leaves_out_what_the_schema_says_is_the_default(live: LiveServer) -> None:
    """``omit_defaults=true`` (ADR 0028): every job of the queue and of history less
    the fields at the default the OpenAPI document gives, the others as without it."""
    auth = {"Authorization": f"Bearer {live.token}"}
    schema = http.get(f"{live.url}/openapi.json", timeout=120).json()
    props = schema["components"]["schemas"]["JobInfoFields"]["properties"]
    defaults = {name: prop["default"] for name, prop in props.items() if "default" in prop}
    assert {"start_time", "nodes", "array_job_id", "steps"} <= defaults.keys()
    fields = "id,state,start_time,end_time,nodes,array_job_id,priority,steps"
    for extra in ({"all": "true"}, {"history": "true"}):
        params = {"fields": fields, **extra}
        full = http.get(f"{live.url}/v1/jobs", params=params, headers=auth).json()["jobs"]
        params["omit_defaults"] = "true"
        some = http.get(f"{live.url}/v1/jobs", params=params, headers=auth).json()["jobs"]
        assert full and len(some) == len(full)
        for short, whole in zip(some, full, strict=True):
            assert {**{k: defaults[k] for k in whole if k not in short}, **short} == whole
            assert all(k not in defaults or v != defaults[k] for k, v in short.items())
        assert any(len(short) < len(whole) for short, whole in zip(some, full, strict=True))


def test_the_server_builds_squeues_json_before_squeue_asks(
    live: LiveServer, tmp_path: Path
) -> None:
    """Within a round of ``keep_warm`` after a job's submission the server holds its JSON
    of squeue's default set, and a list of it serves that JSON as kept, building none."""
    job_id = _sbatch(live, tmp_path, "--hold")  # (held: the same version throughout)
    cluster = getattr(live.server, "cluster")  # noqa: B009 (LiveServer.server: object)
    cache = job_list_cache(cluster)

    def kept() -> object:
        shape = cache.shapes.get((SQUEUE_FIELDS, True))
        entry = None if shape is None else shape.entries.get(job_id)
        return entry if entry is not None and entry.job is cluster.jobs[job_id] else None

    wait_until(lambda: kept() is not None, timeout=3 * WARM_EVERY_S, message="its JSON kept")
    entry = kept()
    params = {"id": str(job_id), "fields": ",".join(SQUEUE_FIELDS), "omit_defaults": "true"}
    auth = {"Authorization": f"Bearer {live.token}"}
    got = http.get(f"{live.url}/v1/jobs", params=params, headers=auth)
    assert got.status_code == 200 and [j["id"] for j in got.json()["jobs"]] == [job_id]
    assert kept() is entry  # (the list built nothing for it)
