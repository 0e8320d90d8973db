"""HTC sessions end to end: a real control plane, real agents, workers as HAL jobs."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal import htc
from hal.cli import htc as cli_htc
from hal.core.errors import Conflict, HalError
from hal.htc import HtcClient
from hal.htc.client import default_pythonpath
from hal.htc.examples import EXECUTABLE  # a program speaking the stdin/stdout protocol
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

SQUARE = "hal.htc.examples:square"
SLEEP = "hal.htc.examples:sleep_ms"


def test_a_map_of_10000_tasks_returns_every_result_exactly_once(hc: HtcClient) -> None:
    with hc.open_session(SQUARE, max_workers=2) as s:
        assert list(s.map(range(10_000))) == [x * x for x in range(10_000)]
        futures = s.submit_many([(x,) for x in range(1000)])
        assert sorted(f.result(30) for f in htc.as_completed(futures, 30)) == sorted(
            x * x for x in range(1000)
        )
        session_id = s.id
    info = hc.session(session_id)
    assert info.state == "DONE"
    assert info.completed == info.submitted == 11_000 and info.failed == 0


def test_an_ordered_map_behind_a_slow_task_holds_at_most_its_window(hc: HtcClient) -> None:
    """Results that came before a slow earlier one wait in the client for their turn; they
    did not count against ``window``, so the map kept submitting and buffered all of them
    (a million-item map behind one straggler held every result in memory)."""
    with hc.open_session(SLEEP, min_workers=2, max_workers=2) as s:
        wait_until(
            lambda: sum(w.state == "ready" for w in hc.session(s.id).workers) == 2,
            message="2 workers",
        )
        assert list(s.map([5] * 200)) == [5] * 200  # workers' windows now ~2 tasks
        taken = 0

        # while the 2 s task runs, the other worker could run all 400 short ones: a map
        # that did not hold at its window would have taken every item by then
        def items() -> Iterator[int]:
            nonlocal taken
            for x in [2000] + [5] * 400:
                taken += 1
                yield x

        results = s.map(items(), window=4)
        assert next(results) == 2000
        assert taken <= 8, f"{taken} items taken while the first ran, window 4"
        assert list(results) == [5] * 400


def test_an_ordered_map_raises_a_failed_task_in_its_place(hc: HtcClient) -> None:
    """An ordered map yields the results before a failed task, then raises its error (as
    ``Executor.map`` does); the error used to be raised as soon as it arrived, so results
    of earlier tasks still running were never seen."""
    with hc.open_session(SLEEP, min_workers=2, max_workers=2) as s:
        wait_until(
            lambda: sum(w.state == "ready" for w in hc.session(s.id).workers) == 2,
            message="2 workers",
        )
        assert list(s.map([5] * 200)) == [5] * 200  # workers' windows now ~2 tasks
        results = s.map([1000, 5, "not a number", 5])  # the error comes back first
        assert [next(results), next(results)] == [1000, 5]
        with pytest.raises(htc.TaskFailed, match="TypeError"):
            next(results)


def test_common_data_is_sent_once_and_read_by_every_task(hc: HtcClient) -> None:
    with hc.open_session("hal.htc.examples:scaled", common=3, max_workers=2) as s:
        assert list(s.map([1, 2, 5])) == [3, 6, 15]


def test_common_data_that_is_not_msgpack_is_refused_before_a_session_opens(
    hc: HtcClient,
) -> None:
    """Common data was packed only after the session had opened: msgpack's TypeError came
    out, and the session stayed OPEN with this process still attached and nothing to
    tell its workers, waiting for common data that never came."""
    before = {x.id for x in hc.sessions()}
    with pytest.raises(TypeError, match=r"common data .*msgpack.*'set'"):
        hc.open_session(SQUARE, common={1, 2}, max_workers=1)
    assert {x.id for x in hc.sessions()} == before


def test_errors_timeouts_and_retries_come_back_as_task_errors(hc: HtcClient) -> None:
    with hc.open_session(SLEEP, task_timeout=0.3, retries=1, max_workers=1) as s:
        slow, quick = s.submit(3000), s.submit(1)
        with pytest.raises(htc.TaskTimedOut, match=r"timeout of 0\.3 s"):
            slow.result(30)
        assert quick.result(30) == 1
        assert hc.session(s.id).retried == 1  # the timed-out task ran twice
    with (
        hc.open_session("hal.htc.examples:fail", max_workers=1) as s,
        pytest.raises(htc.TaskFailed, match="ValueError: bad input"),
    ):
        s.submit("bad input").result(30)


def test_cancelling_a_session_fails_its_open_tasks_and_frees_its_workers(
    hc: HtcClient, server: LiveServer
) -> None:
    s = hc.open_session(SLEEP, max_workers=2)
    futures = s.submit_many([(20,)] * 2000)
    futures[0].result(30)
    info = hc.cancel(s.id)
    assert info.state == "CANCELLED"
    with pytest.raises(htc.SessionEnded, match="CANCELLED"):
        futures[-1].result(10)
    s.disconnect()
    with server.client() as c:
        wait_until(
            lambda: not [j for j in c.jobs() if j.name == f"htc-{s.id}"],
            timeout=30,
            message="the session's worker jobs to end",
        )


def test_a_session_outlives_its_client_and_is_reattached_by_id(
    hc: HtcClient, server: LiveServer
) -> None:
    s = hc.open_session(SQUARE, max_workers=2)
    ids = {f.task_id: x for x, f in enumerate(s.submit_many([(x,) for x in range(500)]))}
    s.detach()
    with HtcClient(server.url, server.token) as other:
        again = other.attach(s.id)
        got = {r.task_id: r.value for r in again.results(timeout=30)}
        assert got == {task_id: x * x for task_id, x in ids.items()}
        assert again.submit(12).result(30) == 144  # new tasks continue the id sequence
        assert again.close(30) == "DONE"


def test_futures_still_open_when_the_client_detaches_fail_saying_how_to_collect_them(
    hc: HtcClient, tmp_path: Path
) -> None:
    """A detached client gets no more results: its open futures (and a ``map`` waiting
    in another thread) used to wait forever. They fail at once, saying where the results
    went; the reattached client collects every one."""
    gate = tmp_path / "gate"
    s = hc.open_session("hal.htc.examples:after_file", max_workers=1)
    futures = s.submit_many([(str(gate), x) for x in range(3)])
    mapped: list[BaseException] = []

    def run_map() -> None:
        try:
            list(s.map([(str(gate), x) for x in range(3, 5)], star=True))
        except BaseException as err:
            mapped.append(err)

    thread = threading.Thread(target=run_map, daemon=True)
    thread.start()
    wait_until(lambda: hc.session(s.id).submitted == 5, message="the map's 2 tasks")
    s.detach()
    hint = rf"detached.*attach\('{s.id}'\)\.results\(\)"
    for f in futures:
        with pytest.raises(Conflict, match=hint):
            f.result(10)
    thread.join(10)
    assert len(mapped) == 1 and isinstance(mapped[0], Conflict), mapped
    assert re.search(hint, str(mapped[0]))
    gate.touch()
    again = hc.attach(s.id)
    got = {r.task_id: r.value for r in again.results(timeout=30)}
    assert got == {first + x: x for first in [futures[0].task_id] for x in range(5)}
    assert again.close(30) == "DONE"


CRASHING_CLIENT = textwrap.dedent(
    """
    import os, sys
    from hal.htc import HtcClient
    url, token, gate = sys.argv[1:]
    s = HtcClient(url, token).open_session("hal.htc.examples:after_file", max_workers=2)
    futures = s.submit_many([(gate, x) for x in range(300)])
    print(s.id, futures[0].task_id, futures[-1].task_id, flush=True)
    os._exit(0)  # no detach, no close: the client process just ends
    """
)


def test_a_session_is_reattached_from_another_process_after_its_client_died(
    hc: HtcClient, server: LiveServer, tmp_path: Path
) -> None:
    """The client that opened the session is another process, which ends abruptly right
    after submitting. This process reattaches by id, gets all 300 results the dead client
    never saw (no task can finish before ``gate`` exists, so none was acknowledged), and
    carries on with new tasks."""
    gate = tmp_path / "gate"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", CRASHING_CLIENT, server.url, server.token, str(gate)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    session_id, first, last = out.stdout.split()
    gate.touch()
    again = hc.attach(session_id)
    assert again.outstanding_at_attach == 300
    got = {r.task_id: r.value for r in again.results(timeout=30)}
    assert got == {task_id: task_id - int(first) for task_id in range(int(first), int(last) + 1)}
    assert again.submit(str(gate), "more").result(30) == "more"
    assert again.close(30) == "DONE"
    info = hc.session(session_id)
    assert (info.submitted, info.completed, info.failed) == (301, 301, 0)


def test_a_workers_key_is_not_on_its_command_line(hc: HtcClient, server: LiveServer) -> None:
    """Any user of a node reads every process's command line (``ps``, /proc/PID/cmdline).
    The worker job ran ``hal.htc.worker --key SECRET``: whoever saw it could connect as
    the session's worker and get its tasks' arguments and common data, or answer them
    with forged results. The key goes in the worker job's environment (readable by its
    user and root only); the worker still connects with it."""
    with hc.open_session(SQUARE, min_workers=1, max_workers=1) as s:
        wait_until(
            lambda: [w for w in hc.session(s.id).workers if w.state == "ready"],
            message="a worker",
        )
        worker = hc.session(s.id).workers[0]
        cmdline = Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0")
        assert b"hal.htc.worker" in cmdline and s.id.encode() in cmdline
        assert b"--key" not in cmdline
        with server.client() as admin:
            script = admin.job_script(worker.job_id)
        assert "--key" not in script and "hal.htc.worker" in script
        assert list(s.map([3])) == [9]


def test_killing_a_worker_mid_run_retries_its_tasks_elsewhere(hc: HtcClient) -> None:
    with hc.open_session(SLEEP, min_workers=2, max_workers=2) as s:
        wait_until(
            lambda: sum(w.state == "ready" for w in hc.session(s.id).workers) == 2,
            message="2 workers",
        )
        results = s.map([5] * 600)
        first = [next(results) for _ in range(50)]
        victim = hc.session(s.id).workers[0].pid
        os.kill(victim, signal.SIGKILL)
        rest = list(results)
        assert first + rest == [5] * 600
        info = hc.session(s.id)
        assert info.worker_deaths == 1 and info.completed == 600 and info.failed == 0


def test_a_task_that_crashes_every_worker_is_failed_with_a_clear_error(hc: HtcClient) -> None:
    with hc.open_session("hal.htc.examples:crash_on", max_workers=2, max_worker_deaths=2) as s:
        out = list(s.map([(x, 5) for x in range(20)], star=True, return_exceptions=True))
    assert out[:5] == list(range(5)) and out[6:] == list(range(6, 20))
    assert isinstance(out[5], htc.PoisonTask)
    assert "running alone on 2 workers that died" in str(out[5])


def test_an_executable_service_answers_reports_failures_and_survives_a_timeout(
    hc: HtcClient,
) -> None:
    """A program speaking the length-prefixed stdin/stdout protocol (written with no HAL
    import) serves a session. The task that times out leaves its program answering late;
    the 20 tasks queued behind it on the same single worker still get their own replies."""
    with hc.open_session(EXECUTABLE, max_workers=1, task_timeout=0.5) as s:
        assert list(s.map([b"abc", "text"])) == [b"ABC", b"TEXT"]
        with pytest.raises(TypeError, match="one argument, bytes or str, not int 5"):
            s.submit(5)  # was sent as bytes(5): five zero bytes
        with pytest.raises(htc.TaskFailed, match="no such trade"):
            s.submit(b"fail:no such trade").result(30)
        slow = s.submit(b"sleep:3000")
        behind = s.submit_many([(f"t{i}",) for i in range(20)])
        with pytest.raises(htc.TaskTimedOut, match=r"timeout of 0\.5 s"):
            slow.result(30)
        assert [f.result(30) for f in behind] == [f"T{i}".encode() for i in range(20)]


def test_a_request_that_kills_the_executable_is_failed_as_poison(hc: HtcClient) -> None:
    """The program exits under one request: its worker exits too, the request is rerun
    alone on fresh workers, and after ``max_worker_deaths`` it fails with a clear error
    while the other requests (and the later ones) succeed."""
    with hc.open_session(EXECUTABLE, max_workers=2, max_worker_deaths=2) as s:
        requests = [f"r{i}".encode() for i in range(30)]
        requests[10] = b"crash"
        out = list(s.map(requests, return_exceptions=True))
        assert out[:10] + out[11:] == [r.upper() for r in requests[:10] + requests[11:]]
        assert isinstance(out[10], htc.PoisonTask)
        assert "running alone on 2 workers that died" in str(out[10])
        assert s.submit(b"after").result(30) == b"AFTER"
        info = hc.session(s.id)
    assert info.worker_deaths >= 2 and info.failed == 1


def test_a_batch_job_and_a_session_at_once_both_finish(hc: HtcClient, server: LiveServer) -> None:
    with server.client() as c, hc.open_session(SLEEP, max_workers=2) as s:
        job = c.submit(JobSubmit(script="#!/bin/sh\nsleep 1\n", workdir="/tmp", stdout="/dev/null"))
        assert list(s.map([5] * 300)) == [5] * 300
        wait_until(lambda: c.job(job.job_id).state == "COMPLETED", message="the batch job")


def test_a_service_that_cannot_load_fails_the_session_with_its_error(hc: HtcClient) -> None:
    with (
        hc.open_session("no_such_module_here:f", max_workers=1) as s,
        pytest.raises(htc.SessionEnded, match="No module named 'no_such_module_here'"),
    ):
        s.submit().result(60)


def hal_htc(argv: list[str], monkeypatch: pytest.MonkeyPatch, server: LiveServer) -> int:
    """``hal htc ...`` in this process (the parser is wired by ``hal.cli.parser``)."""
    monkeypatch.setenv("HAL_URL", server.url)
    monkeypatch.setenv("HAL_TOKEN", server.token)
    parser = argparse.ArgumentParser(prog="hal")
    cli_htc.add_commands(parser.add_subparsers())
    ns = parser.parse_args(["htc", *argv])
    result: int = ns.func(ns)
    return result


def test_hal_htc_sessions_and_show(
    hc: HtcClient,
    server: LiveServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with hc.open_session(SQUARE, max_workers=1, name="cli") as s:
        s.submit(2).result(30)
        assert hal_htc(["sessions"], monkeypatch, server) == 0
        listing = capsys.readouterr().out
        assert s.id in listing and "OPEN" in listing and "BACKLOG" in listing
        assert hal_htc(["show", s.id], monkeypatch, server) == 0
        shown = capsys.readouterr().out
        assert "completed: 1" in shown and SQUARE in shown and "ready on" in shown
    assert hal_htc(["sessions", "--all", "--json"], monkeypatch, server) == 0
    assert f'"id": "{s.id}"' in capsys.readouterr().out
    with pytest.raises(HalError, match="no HTC session"):
        hal_htc(["show", "s000000000000"], monkeypatch, server)


TOUCH_SERVICE = """
import os, time
from pathlib import Path


def touch_after(gate, path):
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    Path(path).touch()
    return path
"""


def test_a_cancelled_task_that_no_worker_holds_never_runs(hc: HtcClient, workdir: str) -> None:
    """``future.cancel()`` on a task still queued at the broker withdraws it: True, and
    it never runs (its file never appears), while the tasks around it do. On a task a
    worker holds it returns False, as ``concurrent.futures`` does for a running future,
    and that task's result still comes (it used to say True and run the task all the
    same)."""
    tmp = Path(workdir)
    (tmp / "touchsvc.py").write_text(TOUCH_SERVICE)
    gate = tmp / "gate"
    path = f"{tmp}{os.pathsep}{default_pythonpath()}"
    s = hc.open_session("touchsvc:touch_after", max_workers=1, environment={"PYTHONPATH": path})
    try:
        first = s.submit(str(gate), str(tmp / "first"))
        wait_until(lambda: hc.session(s.id).in_flight == 1, timeout=60, message="a worker")
        # one worker holds at most its window (2 here) of these: the others wait at the broker
        queued = s.submit_many([(str(gate), str(tmp / f"q{i}")) for i in range(200)])
        victim = queued[-1]
        assert first.cancel() is False
        assert victim.cancel() is True
        assert victim.cancelled() and victim.cancel() is True
        gate.touch()
        assert first.result(60) == str(tmp / "first")
        assert [f.result(60) for f in queued[:-1]] == [str(tmp / f"q{i}") for i in range(199)]
        assert s.close(timeout=60) == "DONE"
        assert not (tmp / "q199").exists()
        assert hc.session(s.id).completed == 200
    finally:
        gate.touch()
        s.disconnect()


def test_a_cold_session_spreads_long_tasks_over_its_workers(hc: HtcClient) -> None:
    """A new session's first window was 64 tasks: the first worker to connect took all 8
    tasks of 0.6 s and the second, ready a moment later, idled (8 x 2 s took 16.6 s on 2
    workers). Until the task length is known a worker holds 2."""
    with hc.open_session("hal.htc.examples:sleep_pid", max_workers=2) as s:
        pids = [f.result(60) for f in s.submit_many([(600,)] * 8)]
    assert len(set(pids)) == 2, pids


def test_an_executable_that_exits_at_once_fails_the_session_after_3_workers(
    hc: HtcClient, server: LiveServer
) -> None:
    """``/bin/false`` never answers: each of 10 tasks killed 3 workers and ended as
    poison (31 worker jobs). It is a service that fails to start, as a missing program
    is: the session fails after 3 workers, its tasks unblamed."""
    with hc.open_session(["/bin/false"], max_workers=1) as s:
        futures = s.submit_many([(b"x",)] * 10)
        with pytest.raises(htc.SessionEnded, match="FAILED") as err:
            futures[0].result(60)
    assert err.value.reason == (
        "the service failed to start on 3 workers; the last one said: the service program "
        "/bin/false exited with status 1 before answering any task"
    )
    info = hc.session(s.id)
    assert info.state == "FAILED" and info.worker_deaths == 0
    with server.client() as c:
        assert len(c.jobs(names=[f"htc-{s.id}"], history=True)) == 3


def test_leaving_a_map_early_withdraws_the_tasks_it_sent(hc: HtcClient) -> None:
    """A ``break`` out of a map, or the error it raises, left every task it had sent to
    run, and ``close()`` waited for them all (here 2 x 200 tasks of 50 ms: 20 s). Those
    no worker holds yet are withdrawn."""
    with hc.open_session(SLEEP, min_workers=1, max_workers=1) as s:
        for value in s.map([50] * 200):
            assert value == 50
            break
        with pytest.raises(htc.TaskFailed, match="TypeError"):
            list(s.map(["not a number"] + [50] * 200))
        started = time.monotonic()
        assert s.close(30) == "DONE"
        assert time.monotonic() - started < 5
    info = hc.session(s.id)
    assert info.submitted == 401 and info.completed + info.failed < 20, info


def test_a_task_over_its_workers_memory_is_reported_as_out_of_memory(hc: HtcClient) -> None:
    """It was failed as poison with "Run it outside HAL to see why it crashes the
    process", where it works: its worker job was killed for its memory."""
    with (
        hc.open_session(
            "hal.htc.examples:hold_mib",
            max_workers=1,
            memory_per_worker=100 * 2**20,
            max_worker_deaths=1,
        ) as s,
        pytest.raises(htc.PoisonTask) as err,
    ):
        s.submit(400).result(60)
    assert "the worker job ran out of memory: memory_per_worker=100 MiB" in str(err.value)
    assert "Run it outside HAL" not in str(err.value)
