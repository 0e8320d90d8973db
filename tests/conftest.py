"""Shared test set-up: markers for what a test needs, slow-test gating and a fresh
PostgreSQL database per test.

Markers (registered in pyproject.toml; docs/development.md says how to select by them) are
put on from what a test uses wherever that shows, explicitly elsewhere:

- ``live``: the test's module, or the module of a fixture it uses, holds the kit that starts
  HAL's own processes on loopback (``hal.testing.live.LiveServer``; the cache tests'
  ``cachetree`` control plane and nodes). Modules that start them another way (``hal up``
  in a subprocess) say so with ``pytestmark``.
- ``postgres``: the test uses ``pg_url``/``module_pg_url``, or one of its parameters is the
  PostgreSQL store (``each_store``'s ``postgresql``, ``db_url``'s ``postgres``).
- ``replay``: the test's module reads a real workload trace (``hal.testing.traces.
  trace_path``): a simulator replay of thousands of jobs, seconds to a minute each.
- ``slurm_peer``, ``browser``, ``gpu``: explicit, on the few tests that need them.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, settings

from hal.testing.traces import trace_path

# Python's bytecode caches (``__pycache__``, git-ignored; pytest's rewritten test modules
# among them) are written during the tests even where ``PYTHONDONTWRITEBYTECODE`` is set
# (this machine; some CI images): each xdist worker imports all 660 test modules to
# collect them, 44 s of CPU without the cache, 19 s with it; and the live tests start a
# thousand and more ``hal`` processes (agents, commands), each of which compiled the
# modules it imports anew (``hal squeue``: 0.12 s of CPU, 0.04 s from the cache). Set
# here, before the test modules are imported; the workers and every process the tests
# start inherit the environment.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

RUN_SLOW = os.environ.get("CI", "").lower() == "true" or os.environ.get("HAL_SLOW") == "1"

# Hypothesis's clocks (the health check on slow input generation, each example's
# deadline) time the machine: under the whole suite on 2 shared cores a property test
# failed for drawing 5 inputs in 4.5 s. Speed is measured in bench/, not here. A
# developer's run tries a third of each property's examples (hal.testing.examples); CI
# tries them all.
settings.register_profile("suite", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.register_profile("dev", settings.get_profile("suite"), max_examples=34)
settings.load_profile("suite" if RUN_SLOW else "dev")

# (module, class) of what starts HAL's processes for a test
LIVE_KIT = {
    ("hal.testing.live", "LiveServer"),
    ("cachetree", "ControlPlane"),
    ("cachetree", "Node"),
    ("cachetree", "Tree"),
}
POSTGRES_FIXTURES = {"pg_url", "module_pg_url"}
POSTGRES_PARAMS = {"postgres", "postgresql"}


def _holds_live_kit(namespace: Mapping[str, object], seen: dict[int, bool]) -> bool:
    key = id(namespace)
    if key not in seen:
        seen[key] = any(
            isinstance(value, type) and (value.__module__, value.__name__) in LIVE_KIT
            for value in list(namespace.values())
        )
    return seen[key]


def _is_live(item: pytest.Item, seen: dict[int, bool]) -> bool:
    module = getattr(item, "module", None)
    if module is not None and _holds_live_kit(vars(module), seen):
        return True
    info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the fixtures used
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(
        _holds_live_kit(getattr(d.func, "__globals__", {}), seen)
        for defs in definitions
        for d in defs
    )


def _uses_postgres(item: pytest.Item) -> bool:
    if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return any(isinstance(v, str) and v in POSTGRES_PARAMS for v in params)


# A live test waits on real processes (servers, agents, jobs) with deadlines; on a shared
# 2-core machine under the whole suite's load one may miss its deadline where it passes
# alone. It gets one more try; the first failure still shows ("R" in the progress line,
# "rerun" in the summary, its report with -rR), so a test that fails twice fails the run.
LIVE_RERUN = pytest.mark.flaky(reruns=1, reruns_delay=2)


# What a test costs, roughly, by what it needs (seconds of wall time under the whole suite's
# load on 2 cores; ``hypothesis`` is the marker Hypothesis puts on a property test): the
# first of its markers in this list counts. Only the order of the modules they give matters
# (``_longest_modules_first``); docs/benchmarks.md, "The test suite", has the figures.
COST_BY_MARKER = (
    ("slow", 60.0),
    ("replay", 15.0),
    ("live", 8.0),
    ("postgres", 2.0),
    ("hypothesis", 4.0),
)
COST_OTHERWISE = 0.1


def _cost(item: pytest.Item) -> float:
    if any(m.name == "skip" for m in item.iter_markers()):
        return 0.0
    return next((cost for name, cost in COST_BY_MARKER if name in item.keywords), COST_OTHERWISE)


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """Orders the modules by their estimated cost, the longest first, each module's tests
    in their order. pytest-xdist's ``--dist loadscope`` hands out whole modules (one
    worker runs all of a module's tests, which may share a server) in the collection's
    order with ``--no-loadscope-reorder`` (the Makefile's); by default it orders them by
    their number of tests, which put the modules of one or two long live tests (a
    workflow, a failover) last, to run on one worker while the others had finished: the
    run's tail. Longest first (LPT), the short unit modules are left to even out the end."""
    cost: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        cost[module] = cost.get(module, 0.0) + _cost(item)
    # sorted() is stable: a module's tests, and modules of equal cost, keep their order
    items[:] = sorted(items, key=lambda item: -cost[item.nodeid.split("::", 1)[0]])


@pytest.hookimpl(trylast=True)  # after pytest's own ordering (by fixture scope)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[int, bool] = {}
    skip = pytest.mark.skip(reason="slow test: runs in CI (CI=true) or with HAL_SLOW=1")
    for item in items:
        if _is_live(item, seen):
            item.add_marker(pytest.mark.live)
        if "live" in item.keywords:
            item.add_marker(LIVE_RERUN)
        if _uses_postgres(item):
            item.add_marker(pytest.mark.postgres)
        module = getattr(item, "module", None)
        if module is not None and getattr(module, "trace_path", None) is trace_path:
            item.add_marker(pytest.mark.replay)
        if not RUN_SLOW and "slow" in item.keywords:
            item.add_marker(skip)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order it hands out
        _longest_modules_first(items)


PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"


@contextmanager
def _fresh_pg_database() -> Iterator[str]:
    """A new database on the machine's PostgreSQL, dropped on exit; skips when that
    server is not reachable."""
    try:
        import psycopg

        with psycopg.connect(PG_DSN, connect_timeout=3):
            pass
    except Exception as err:  # the reason is shown in the skip message
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({err.__class__.__name__})")
    name = "hal_test_" + secrets.token_hex(4)
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh database on the machine's PostgreSQL for one test, dropped afterwards
    (the state-store tests override it with one database per run)."""
    with _fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """``pg_url`` shared by a module's tests, for a server they share."""
    with _fresh_pg_database() as url:
        yield url


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test that runs a command's ``main`` in the test process configures logging (a
    handler on the root logger writing to the ``sys.stdout`` of that moment, which pytest
    closes after the test): the handlers and levels it set are taken back, so a later
    test's log lines do not fail on a closed stream (seen under pytest-xdist, where one
    worker runs many modules)."""
    import logging

    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore")
    kept = {
        name: (list(lg.handlers), lg.level, lg.propagate)
        for name in names
        for lg in [logging.getLogger(name)]
    }
    yield
    for name, (handlers, level, propagate) in kept.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
