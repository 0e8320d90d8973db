"""Schemathesis over HAL's whole REST API (``/openapi.json``) on a live server.

Every operation the server documents, with positive and negative data, as an
administrator: no answer may be a server error (5xx), and every answer must have a status,
content type and body its operation documents (``schemathesis.toml`` says which checks
run; ``fuzz_hooks.py`` keeps the agents' long polls and the event stream bounded).

What is not fuzzed here, and why:
- ``/slurm/v0.0.4x/...``, the slurmrestd facade: it is mounted as its own application (not
  in ``/openapi.json``) and answers a refusal with HTTP 500 and Slurm's error number on
  purpose, as slurmrestd does; test_slurmrest_checked_server.py checks it against Slurm's
  own OpenAPI document.
- ``/metrics``, ``/ui``, ``/`` and ``/internal/workers``: not API operations
  (``include_in_schema=False``: Prometheus text, the dashboard's files, a redirect, the
  HTC workers' channel, each with its own tests).

A ``Target`` is one server to fuzz: its store and the phases CI runs there. A standby
of the leader's PostgreSQL database is fuzzed too (its own test below): every request but
``/healthz``, ``/v1/ha`` and ``/metrics`` must get its 307 to the leader (or a 503), never
a server error, and nothing may reach the database through it.

In CI, to stay near a minute on 2 cores, PostgreSQL (the production store) gets the
coverage phase (the schema's boundary and invalid values of every parameter, each
operation's undocumented methods) and SQLite the fuzzing phase (random valid and invalid
requests, ``EXAMPLES`` an operation). ``HAL_FUZZ_EXAMPLES=N`` runs every phase on every
target, N examples an operation: the longer run docs/benchmarks.md reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as Started
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until

# minutes of requests on 2 cores: CI runs them (CI=true), `make test` with HAL_SLOW=1
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
CONFIG = HERE / "schemathesis.toml"
HOOKS = HERE / "fuzz_hooks.py"
EXAMPLES = 4  # per operation, in CI
ALL_PHASES = "examples,coverage,fuzzing"
CASES = re.compile(r"^\s*\d+ generated")  # schemathesis' count of the cases it sent
SPARE = "fuzz-spare"  # the user whose token the run may replace (fuzz_hooks.py)


@contextmanager
def _leader(tmp_path: Path, db_url: str | None) -> Iterator[LiveServer]:
    with LiveServer(tmp_path, db_url=db_url) as live:
        live.add_users(SPARE)
        # the document is built at the first ask, seconds on a loaded machine: not on
        # schemathesis' clock
        http.get(f"{live.url}/openapi.json", timeout=120).raise_for_status()
        yield live


def _postgresql(request: pytest.FixtureRequest, tmp_path: Path) -> Started[LiveServer]:
    return _leader(tmp_path, request.getfixturevalue("pg_url"))


def _sqlite(_request: pytest.FixtureRequest, tmp_path: Path) -> Started[LiveServer]:
    return _leader(tmp_path, None)


@dataclass(frozen=True)
class Target:
    name: str
    phases: str  # schemathesis' phases in CI; every phase with HAL_FUZZ_EXAMPLES
    start: Callable[[pytest.FixtureRequest, Path], Started[LiveServer]]


TARGETS = {
    t.name: t
    for t in (
        Target("postgresql", "coverage", _postgresql),
        Target("sqlite", "fuzzing", _sqlite),
    )
}


# (parameters by name: tests/conftest.py marks the "postgresql" one ``postgres``)
@pytest.fixture(params=list(TARGETS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, LiveServer]]:
    chosen = TARGETS[request.param]
    with chosen.start(request, tmp_path) as live:
        yield chosen, live


def _schemathesis() -> str | None:
    exe = Path(sys.executable).with_name("schemathesis")
    return str(exe) if exe.exists() else shutil.which("schemathesis")


def fuzz(
    live: LiveServer, phases: str, examples: int, report: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The schemathesis CLI against ``live``, with its administrator's token (``extra``:
    more of the CLI's options)."""
    exe = _schemathesis()
    if exe is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": str(HOOKS),
        "HAL_FUZZ_SELF": "admin",
        "HAL_FUZZ_SPARE": SPARE,
    }
    command = [exe, "--config-file", str(CONFIG), "run", f"{live.url}/openapi.json"]
    command += ["--header", f"Authorization: Bearer {live.token}", "--phases", phases]
    command += ["--max-examples", str(examples), "--seed", os.environ.get("HAL_FUZZ_SEED", "56")]
    command += ["--report", "junit", "--report-junit-path", str(report), *extra]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=540 + examples * 120, check=False
    )


# about a minute on an idle machine (4 on one loaded by other work); the longer run more
@pytest.mark.timeout(600 + 120 * int(os.environ.get("HAL_FUZZ_EXAMPLES") or 0))
def test_the_rest_api_answers_every_case_as_documented(
    target: tuple[Target, LiveServer], tmp_path: Path
) -> None:
    chosen, live = target
    asked = os.environ.get("HAL_FUZZ_EXAMPLES")
    examples, phases = (int(asked), ALL_PHASES) if asked else (EXAMPLES, chosen.phases)
    started = time.monotonic()
    run = fuzz(live, phases, examples, tmp_path / "junit.xml")
    took = time.monotonic() - started
    cases = [line.strip() for line in run.stdout.splitlines() if CASES.match(line)]
    print(f"{chosen.name}: {phases}, {examples} examples, {cases[-1:]}, {took:.1f} s")
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    # the run kept its administrator: a token replaced under it would have made every
    # case after that a 401 (fuzz_hooks.py)
    auth = {"Authorization": f"Bearer {live.token}"}
    me = http.get(f"{live.url}/v1/users/me", headers=auth, timeout=30)
    assert me.status_code == 200, me.text


def _standby(db_url: str, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A second `hal server` on ``db_url``: it stands by while the leader holds it."""
    port = free_port()
    args = ["server", "--db", db_url, "--data-dir", str(work / "standby"), "--port", str(port)]
    with (work / "standby.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hal.cli.main", *args], stdout=log, stderr=log
        )
    return proc, f"http://127.0.0.1:{port}"


@pytest.mark.timeout(600)
def test_a_standby_answers_every_case_without_a_server_error_or_a_write(
    pg_url: str, tmp_path: Path
) -> None:
    """The leader's document, every request sent to the standby (redirects not
    followed): no 5xx, and the leader's database has no job, user or partition change
    afterwards."""
    with _leader(tmp_path, pg_url) as live:
        standby, url = _standby(pg_url, tmp_path)
        try:

            def standing_by() -> bool:
                assert standby.poll() is None, (tmp_path / "standby.log").read_text()
                try:
                    return bool(http.get(f"{url}/v1/ha", timeout=2).json()["role"] == "standby")
                except httpx.HTTPError:
                    return False

            wait_until(standing_by, 120, message="the second server to stand by")
            auth = {"Authorization": f"Bearer {live.token}"}
            before = [
                http.get(f"{live.url}{path}", headers=auth, timeout=30).json()
                for path in ("/v1/jobs", "/v1/users", "/v1/partitions")
            ]
            run = fuzz(
                live,
                "fuzzing",
                EXAMPLES,
                tmp_path / "junit.xml",
                "--url",
                url,
                "--max-redirects",
                "0",
                "--checks",
                "not_a_server_error",
            )
            assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
            after = [
                http.get(f"{live.url}{path}", headers=auth, timeout=30).json()
                for path in ("/v1/jobs", "/v1/users", "/v1/partitions")
            ]
            assert after == before
            assert standby.poll() is None
        finally:
            standby.kill()
            standby.wait(10)
