"""What ``sbatch`` and ``squeue`` load to start (issue 51). Workflow tools run them once
per job (Snakemake, Parsl, Nextflow, PSI/J), so their cost is the interpreter's start
plus what they import. Each command runs here as a tool runs it, a new process through
the shims' entry point, against a small HTTP server standing in for HAL's; then the
modules it loaded are checked: none of the server's packages, no pydantic or httpx (the
SDK's schemas and its old transport), and none of the standard library's modules that
cost about as much as the interpreter's own start. A structural rule, not a timing one:
``hal bench submit`` measures the time, beside a bare ``python -c pass``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from compat_fakes import FakeClient, job, node, partition, running

from hal.compat.shims import ENTRY
from hal.wire.jobs import JobList
from hal.wire.nodes import NodeList, PartitionList
from hal.wire.priority import (
    FactorValues,
    JobPriorityInfo,
    PriorityList,
    PriorityWeightsInfo,
    ShareInfo,
    ShareList,
)
from hal.wire.reservations import ReservationList
from hal.wire.steps import StepList, TaskUsage

SERVER_SIDE = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "numpy",
    "lightgbm",
    "matplotlib",
    "boto3",
    "opentelemetry",
    "prometheus_client",
    "hal.api",
    "hal.server",
    "hal.state",
    "hal.scheduler",
    "hal.agent",
    "hal.predict",
    "hal.sim",
    "hal.observe",
)
SCHEMAS = ("pydantic", "pydantic_core", "annotated_types", "httpx", "hal.wire.jobs")
# each costs a large part of a bare interpreter's start (inspect and ast come with
# dataclasses, ipaddress with urllib.parse, selectors with socket, and re with json; re
# brings enum, functools and collections): the client speaks plain HTTP over ``_socket``
# and JSON through ``_json`` (hal.client.cjson), the commands read their options without
# re (tests/unit/compat/test_plain_patterns.py) and their states without enum
SLOW_STDLIB = (
    "socket",
    "selectors",
    "json",
    "re",
    "enum",
    "functools",
    "collections",
    "types",
    "typing",
    "dataclasses",
    "inspect",
    "pathlib",
    "datetime",
    "difflib",
    "runpy",
    "urllib",
    "ipaddress",
    "encodings.idna",
)

DATABASE_AWAY = {
    "status": 503,
    "code": "database_unavailable",
    "detail": "the database is unavailable: PostgreSQL cannot be reached; retry in a few seconds",
}
JOBS = JobList(
    jobs=[
        running(7, name="sim", user="alice"),
        job(8, name="post", user="alice", reason="Dependency"),
    ]
).model_dump_json()
FACTORS = FactorValues(age=12.4, fairshare=5000.0)
SHARE = ShareInfo(
    account="physics",
    user="alice",
    parent="physics",
    depth=2,
    raw_shares=1,
    norm_shares=0.5,
    raw_usage=800.0,
    norm_usage=0.25,
    effective_usage=0.25,
    fairshare=0.574349,
    level_fs=float("inf"),
)
# the other answers, by path: what sinfo, seff, sstat, sprio and sshare ask
ANSWERS = {
    "/v1/nodes": NodeList(nodes=[node("n1"), node("n2", display_state="alloc")]),
    "/v1/partitions": PartitionList(partitions=[partition(default=True, nodes=["n1", "n2"])]),
    "/v1/reservations": ReservationList(reservations=[]),
    "/v1/config": FakeClient().cluster_config(),
    "/v1/jobs/7": running(7, name="sim", user="alice", cpu_seconds=30.0, usage_time=1.0),
    "/v1/jobs/7/steps": StepList.model_validate(
        {
            "steps": [
                {
                    **dict(job_id=7, step_id=0, name="a", nodes=["vm"], tasks=[1]),
                    **dict(state="RUNNING", exit_code=0),
                    "usage": [
                        TaskUsage(
                            rank=0,
                            node="vm",
                            rss_bytes=1 << 20,
                            max_rss_bytes=1 << 21,
                            cpu_seconds=2.0,
                        )
                    ],
                }
            ]
        }
    ),
    "/v1/priority": PriorityList(
        plugin="priority/multifactor",
        weights=PriorityWeightsInfo(age=1000, fairshare=10000),
        jobs=[
            JobPriorityInfo(
                **dict(job_id=8, display_id="8", user="alice", account="physics"),
                **dict(partition="debug", qos="normal", priority=5012, fixed=False, nice=0),
                weighted=FACTORS,
                normalized=FACTORS,
            )
        ],
    ),
    "/v1/shares": ShareList(decay_half_life_seconds=604800, rows=[SHARE]),
}


class FakeHal:
    """Answers what sbatch and squeue ask: a submission (after ``away`` answers of a
    database that is away), the job list, and who the token is."""

    def __init__(self, away: int = 0) -> None:
        self.away = away
        self.posts: list[tuple[dict[str, object], str | None]] = []  # body, Idempotency-Key
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.posts.append((body, self.headers.get("Idempotency-Key")))
                if len(outer.posts) <= outer.away:
                    self._answer(503, json.dumps(DATABASE_AWAY))
                else:
                    self._answer(201, json.dumps({"job_id": 7, "task_ids": []}))

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/v1/users/me":
                    self._answer(200, json.dumps({"name": "alice", "admin": False}))
                elif path in ANSWERS:
                    self._answer(200, ANSWERS[path].model_dump_json())
                else:
                    self._answer(200, JOBS)

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeHal:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hal() -> Iterator[FakeHal]:
    with FakeHal() as server:
        yield server


def run(
    server: FakeHal, cwd: Path, *argv: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``argv`` run as the shims run it, in a new interpreter; and the modules it had
    loaded when it exited."""
    loaded = cwd / "modules.txt"
    probe = (
        "import atexit, sys\n"
        "out = sys.argv.pop(1)\n"
        # (a None entry is a module kept from loading, as hal.cli.main keeps httpx._main)
        "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(\n"
        "    m for m, module in sys.modules.items() if module is not None))))\n"
        f"{ENTRY}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HAL_", "SBATCH_", "SQUEUE_"))}
    env.update(HAL_URL=server.url, HAL_TOKEN="t", HAL_RETRY_SECONDS="30")
    done = subprocess.run(
        [sys.executable, "-c", probe, str(loaded), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, set(loaded.read_text().split())


def assert_lean(modules: set[str], *, stdlib: bool = True) -> None:
    def present(names: tuple[str, ...]) -> list[str]:
        return sorted(m for m in modules for name in names if m == name or m.startswith(name + "."))

    assert present(SERVER_SIDE) == []
    assert present(SCHEMAS) == []
    if stdlib:
        assert present(SLOW_STDLIB) == []


def test_sbatch_wrap_starts_lean_and_sends_an_idempotency_key(hal: FakeHal, tmp_path: Path) -> None:
    done, modules = run(hal, tmp_path, "sbatch", "--hold", "--wrap", "true")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Submitted batch job 7\n", "")
    ((body, key),) = hal.posts
    assert key and body["hold"] is True and body["name"] == "wrap"
    assert "hal.compat.submit" in modules
    assert "hal.client.servers" not in modules  # (finding a leader: HAL_URL lists one)
    assert_lean(modules)


def test_a_workflow_tools_sbatch_starts_lean(hal: FakeHal, tmp_path: Path) -> None:
    """Snakemake's and Nextflow's shape: a script with ``#SBATCH`` lines, options on
    the command line, ``--parsable``."""
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH -J step1\n#SBATCH --mem=1G\n#SBATCH -c 2\n#SBATCH -N 1\necho hi\n"
    )
    argv = ["--parsable", "-t", "10", "-p", "debug", "-o", "out.%j", "--export=ALL", "job.sh"]
    done, modules = run(hal, tmp_path, "sbatch", *argv)
    assert (done.returncode, done.stdout, done.stderr) == (0, "7\n", "")
    ((body, _),) = hal.posts
    assert (body["name"], body["memory_per_node_bytes"], body["cpus_per_task"]) == (
        "step1",
        1 << 30,
        2,
    )
    assert (body["time_limit_seconds"], body["partition"], body["stdout"]) == (
        600,
        "debug",
        "out.%j",
    )
    assert_lean(modules)


def test_sbatch_waits_out_a_database_away_as_the_sdk_does(tmp_path: Path) -> None:
    """The fast path goes through the SDK's request loop: a 503 database_unavailable is
    sent again (Retry-After), with the same Idempotency-Key."""
    with FakeHal(away=1) as hal:
        done, modules = run(hal, tmp_path, "sbatch", "--wrap", "true")
    assert (done.returncode, done.stdout) == (0, "Submitted batch job 7\n")
    assert "retrying" in done.stderr
    (first, first_key), (second, second_key) = hal.posts
    assert first == second and first_key == second_key and first_key
    assert_lean(modules, stdlib=False)  # (the wait is logged: logging, with its re, loads)


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["squeue"], "alice"),
        (["squeue", "--noheader", "--format=%i %t", "--job", "7"], "7 R\n"),  # Parsl
        (["squeue", "-O", "JobArrayID,StateCompact,Reason", "-t", "all", "--me"], "Dependency"),
        (["squeue", "--noheader", "-o", "%i %t", "-t", "all", "-u", "alice"], "8 PD\n7 R\n"),
        (
            ["squeue", "--format=%i|%T", "--states=all", "--noheader", "--name", "sim"],
            "7|RUNNING\n",
        ),
    ],
)
def test_squeue_starts_lean(hal: FakeHal, tmp_path: Path, argv: list[str], out: str) -> None:
    done, modules = run(hal, tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    assert out in done.stdout
    assert "hal.compat.squeue" in modules
    assert_lean(modules)


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["sacct", "-X", "-n", "-o", "JobID,State", "-j", "7"], "RUNNING"),
        (["sacct", "-X", "-P", "-o", "JobID,JobName"], "7|sim"),  # the caller's jobs (whoami)
        (["scontrol", "show", "job", "7"], "JobState=RUNNING"),
        (["scontrol", "-o", "show", "job"], "JobName=post"),
    ],
)
def test_sacct_and_scontrol_show_job_read_records(
    hal: FakeHal, tmp_path: Path, argv: list[str], out: str
) -> None:
    """The commands the live tests and the workflow tools run most after these two read
    the jobs as records too: without pydantic and the wire schemas (a third of their
    start-up); the standard library's modules they load are not held to sbatch's rule."""
    done, modules = run(hal, tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    assert out in done.stdout
    assert f"hal.compat.{argv[0]}" in modules
    assert_lean(modules, stdlib=False)


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["sinfo"], "debug*       up   infinite      1  alloc n2\n"),
        (["sinfo", "-N", "-h"], "n2            1    debug* alloc \n"),
        (["sinfo", "-T"], "No reservations in the system\n"),
        (["seff", "7"], "CPU Utilized: 00:00:30\n"),
        (["sstat", "-a", "-P", "-n", "-o", "JobID,MaxRSS", "-j", "7"], "7.batch|\n7.0|2M\n"),
        (["sprio", "-l", "-h"], "alice"),
        (["sshare", "-a", "-l", "-P", "-n"], "0.574349|inf|"),
    ],
)
def test_node_and_priority_commands_read_records(
    hal: FakeHal, tmp_path: Path, argv: list[str], out: str
) -> None:
    """sinfo (10,000 nodes at a large site), seff, sstat, sprio and sshare read their
    answers as records too: without pydantic and the wire schemas."""
    done, modules = run(hal, tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    assert out in done.stdout
    assert f"hal.compat.{argv[0]}" in modules
    assert_lean(modules, stdlib=False)
