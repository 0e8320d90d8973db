"""Passes decided in a process of their own (ADR 0031).

A pass on a worker thread shares the interpreter with the server's event loop: at
10,000 nodes and 100,000 jobs a pass spent 70–90 % of its time waiting for it, and more
cores did not help. ``ForkedScheduler`` runs each pass of a ``Scheduler`` in a child
process forked at the pass: the child starts with the snapshot and every plugin's state
as the parent has them, copied by the kernel page by page as either side writes (no
serialising of 100,000 jobs), decides on a core of its own, and sends back the
``PassResult`` (pickled, through a pipe), then goes on with the forecast of the plan's
waiting jobs (``Scheduler.forecast``) slice by slice, and exits.

What a pass changes that outlives it travels back too: a plugin names such state
(``CarriesState``: the backfill plugin its predictor, which pins each running job's
prediction), and that state (``PassCarried``) marks itself in the child before the
pass and sends its changes with the result, which the parent adopts. So does what the
framework keeps from pass to pass (``Framework.pass_changes``): the running jobs' rows
the pass wrote to its ledger (by job id) and the PreFilter calls the pass kept for the
jobs waiting behind a blocked queue (asked again of 100,000 waiting jobs, they cost
about 5 % of a forked pass: docs/benchmarks-scale.md). The caches plugins keep from
pass to pass (the dissonance plugin's rows and keys, backfill's fixed run times: 0.05 s
of a pass at 77,000 running jobs) do not travel: each child starts from the parent's,
which are as the server started.

A lock that threads other than the pass's take (``ForkLocked``: the predictor's, which
its trainer holds while it learns; the dissonance plugin's, which a what-if pass takes)
is held across the fork, so that the child never finds one taken by a thread it does
not have. The child keeps none of the parent's sockets open (a killed leader's database
sessions, and with them its lock, end when it dies, not when its last pass does), dies
with the thread that forked it, and is killed when it runs past ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import logging
import math
import os
import pickle
import select
import signal
import stat
import struct
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn, Protocol, runtime_checkable

from hal.scheduler.framework.profile import Profile
from hal.scheduler.framework.scheduler import PassResult, ProcessFacts, Scheduler
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Plan

# Python 3.12+ warns at every fork of a process with threads that the child may
# deadlock: the locks a pass takes are held across the fork (``ForkLocked``), the
# interpreter's own are reset by ``os.fork``, and the child touches no other thread's
# objects (ADR 0031)
warnings.filterwarnings(
    "ignore",
    message=r"This process \(pid=\d+\) is multi-threaded",
    category=DeprecationWarning,
    module=__name__,
)
_LENGTH = struct.Struct("!Q")
# ``[scheduler] pass_process = "auto"``: a pass of fewer jobs than this (pending and
# running) runs on the server's thread (ADR 0031)
FORK_FROM = 5_000
_PR_SET_PDEATHSIG = 1
# prctl, looked up here: not by ``dlopen`` in a child of a process with threads
_PRCTL: Any = None
if sys.platform == "linux":
    with contextlib.suppress(OSError, AttributeError):
        _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
log = logging.getLogger(__name__)


@runtime_checkable
class ForkLocked(Protocol):
    """Optional on a plugin: a lock other threads may hold, held across the fork."""

    def fork_lock(self) -> AbstractContextManager[object]: ...


class PassCarried(Protocol):
    """State a pass changes that later passes read, which a plugin names
    (``CarriesState``): the server's shared predictor, whose pins a pass writes.

    ``fork_began`` (the parent, under the fork locks, before the fork): note what the
    parent forgets from now on, under the token it returns; ``pass_mark`` (the child,
    before the pass, and again before the forecast) and ``pass_changes`` (after each):
    what the child changed, with what it found, as picklable data; ``adopt`` (the
    parent): take those changes in where the parent still holds what the child found
    and forgot nothing of since the fork; ``fork_ended``: the token's child is done."""

    def fork_began(self) -> Any: ...

    def pass_mark(self) -> Any: ...

    def pass_changes(self, mark: Any) -> Any: ...

    def adopt(self, changes: Any, token: Any) -> None: ...

    def fork_ended(self, token: Any) -> None: ...


@runtime_checkable
class CarriesState(Protocol):
    """Optional on a plugin: the state it keeps that a pass changes and later passes
    read (None: none here), carried back from a forked pass."""

    def carried_state(self) -> PassCarried | None: ...


class PassProcessFailed(RuntimeError):
    """The pass's process ended without a result, or raised (its traceback is the
    message), or ran past its time."""


@dataclass(slots=True)
class _Child:
    pid: int
    fd: int
    carried: list[PassCarried]
    tokens: list[object]  # ``fork_began``'s, one per carried plugin
    deadline: float
    jobs: tuple[int, ...] = ()  # a forecaster's: the forecast's jobs (``Plan.forecasting``)
    reaped: bool = False  # (its pid is then no longer ours to signal)
    closed: bool = False
    poll: select.poll = dataclasses.field(default_factory=select.poll)

    def __post_init__(self) -> None:
        self.poll.register(self.fd, select.POLLIN)

    def ready(self, wait_s: float) -> bool:
        """Whether a message (or the end) is there to read within ``wait_s``."""
        # (poll, not select: a server with 10,000 agents' syncs has fds past 1,024)
        return bool(self.poll.poll(max(0.0, wait_s) * 1000))


def profile_plugins(profile: Profile) -> list[object]:
    """Every plugin of ``profile`` once, in the order of its extension points."""
    found: dict[int, object] = {}
    for plugin in (
        profile.queue_sort,
        *profile.pre_filter,
        *profile.filter,
        *profile.post_filter,
        *profile.pre_score,
        *(p for p, _ in profile.score),
        *profile.reserve,
        *profile.permit,
        profile.backfill,
        profile.placement_generate,
        *profile.placement_score,
        *profile.counted,
    ):
        if plugin is not None:
            found.setdefault(id(plugin), plugin)
    return list(found.values())


class ForkedScheduler:
    """``scheduler``'s passes, each decided in a forked child (module docstring).

    Same interface as a ``Scheduler`` to ``PacedScheduler``. ``run_pass`` returns the
    child's ``PassResult`` (``settled`` left out: only the simulator reads it, and it
    holds the whole pass; ``statuses`` too: the server reads only their count,
    ``looked``), with ``process`` set. A snapshot of fewer than ``fork_from`` jobs
    (pending and running) is decided on the calling thread instead, as a ``Scheduler``
    decides it: a small pass costs less than a fork. So is a pass whose fork fails
    (no memory, no processes left), with a warning.

    The forecast: a child whose plan has jobs to forecast (``Plan.forecasting``) goes on
    after its plan, a slice of ``forecast_slice_s`` at a time (the whole forecast, when
    0), sending each slice's updates as it ends: the forecaster. ``forecast(plan)``
    hands over the slices sent so far (waiting up to a slice for the first), and the
    plans of the passes after it name the same jobs until it is done, so that they are
    asked for the rest, as a ``Scheduler`` carries its forecast into the passes that
    run no backfill stage. A pass whose backfill stage is due stops it (its own forecast
    replaces it). Called from one thread at a time, as a ``Scheduler``; ``close`` from
    any."""

    def __init__(
        self, scheduler: Scheduler, *, fork_from: int = 0, timeout_s: float = 600.0
    ) -> None:
        self.fork_from = fork_from
        self.timeout_s = timeout_s
        self._lock = threading.Lock()  # the children's fields, against ``close``
        self._forecaster: _Child | None = None
        self._passing: _Child | None = None  # the child deciding the pass in flight
        self._dead: list[_Child] = []  # killed by ``close``: reaped by the next call
        self.use(scheduler)

    def use(self, scheduler: Scheduler) -> None:
        """Decide the next passes with ``scheduler`` (the server reconfigured); a pass
        in flight finishes with the one it began with, and its forecast goes on."""
        plugins = profile_plugins(scheduler.profile)
        locked = [p for p in plugins if isinstance(p, ForkLocked)]
        carried = [
            state
            for p in plugins
            if isinstance(p, CarriesState) and (state := p.carried_state()) is not None
        ]
        self._with = (scheduler, locked, carried)  # (read whole by a pass)

    @property
    def scheduler(self) -> Scheduler:
        return self._with[0]

    @property
    def forecasting(self) -> tuple[int, ...]:
        """The jobs of the forecast a forecaster still works out (() when none does)."""
        return self._forecaster.jobs if self._forecaster is not None else ()

    @property
    def profile(self) -> Profile:
        return self.scheduler.profile

    @property
    def backfill_interval_s(self) -> float | None:
        return self.scheduler.backfill_interval_s

    @property
    def forecast_slice_s(self) -> float | None:
        return self.scheduler.forecast_slice_s

    def run_pass(
        self,
        snapshot: ClusterSnapshot,
        *,
        backfill: bool = True,
        time_plugins: bool = False,
        depth: int | None = None,
        max_starts: int | None = None,
    ) -> PassResult:
        """``Scheduler.run_pass`` with these options, decided in a forked child (or on
        this thread, below ``fork_from`` jobs)."""
        self._bury()
        options: dict[str, Any] = {
            "backfill": backfill,
            "time_plugins": time_plugins,
            "depth": depth,
            "max_starts": max_starts,
        }
        if backfill:  # (the stage is due: the forecast it makes replaces the last one)
            self._stop_forecaster()
        scheduler = self.scheduler
        result: PassResult | None = None
        if len(snapshot.pending) + len(snapshot.running) >= self.fork_from:
            # The collector is off in the parent too until the result is read, as a
            # pass on the thread turns it off for its time: a full collection meanwhile
            # would walk the server's heap, writing to the pages the child shares
            collecting = gc.isenabled()
            gc.disable()
            try:
                result = self._forked_pass(snapshot, options)
            finally:
                if collecting:
                    gc.enable()
        if result is None:
            result = scheduler.run_pass(snapshot, **options)
        forecaster = self._forecaster
        if forecaster is not None and not result.plan.forecasting:
            plan = dataclasses.replace(result.plan, forecasting=forecaster.jobs)
            result = dataclasses.replace(result, plan=plan)
        return result

    def forecast(
        self, plan: Plan, *, go_on: Callable[[], bool] | None = None
    ) -> tuple[PendingUpdate, ...]:
        """The forecaster's slices sent so far, when ``plan`` names its jobs; else the
        scheduler's own forecast of a plan decided on this thread."""
        self._bury()
        forecaster = self._forecaster
        if forecaster is None or plan.forecasting != forecaster.jobs:
            return self.scheduler.forecast(plan, go_on=go_on)
        updates: list[PendingUpdate] = []
        wait = self.scheduler.forecast_slice_s or self.timeout_s
        try:
            while self._forecaster is forecaster and forecaster.ready(wait):
                (sent, done, changes), _ = self._receive(forecaster)
                updates.extend(sent)
                if done:
                    with self._lock:
                        self._forecaster = None
                    self._end(forecaster, changes)
                wait = 0.0
        except BaseException:
            self._stop_forecaster()
            raise
        return tuple(updates)

    def close(self) -> None:
        """Kill the forecaster and the child deciding a pass in flight (the server
        stopping; from any thread). The thread waiting for the pass finds it ended; the
        forecaster is reaped by the next call, if any."""
        with self._lock:
            forecaster, self._forecaster = self._forecaster, None
            if forecaster is not None:
                self._dead.append(forecaster)
            for child in (forecaster, self._passing):
                if child is not None and not child.reaped:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.pid, signal.SIGKILL)

    # -- the parent ------------------------------------------------------------------

    def _forked_pass(self, snapshot: ClusterSnapshot, options: dict[str, Any]) -> PassResult | None:
        """The pass in a child; None when no child could be made."""
        scheduler, locked, carried = self._with
        # the thread's kept forecast (auto: a pass decided here) is the child's to go
        # on with, and the next to plan with: dropped here, as a pass on the thread would
        scheduler.drop_forecast()
        began = time.perf_counter()
        with contextlib.ExitStack() as held:
            for lock in locked:
                held.enter_context(lock.fork_lock())
            tokens = [plugin.fork_began() for plugin in carried]
            read, write = os.pipe()
            try:
                with self._lock:  # (so that ``close`` finds the child once it is)
                    pid = os.fork()
                    if pid == 0:  # the child: never returns
                        _child_pass(scheduler, carried, (read, write), held, snapshot, options)
                    child = _Child(pid, read, carried, tokens, time.monotonic() + self.timeout_s)
                    self._passing = child
            except OSError as err:
                os.close(read)
                os.close(write)
                for plugin, token in zip(carried, tokens, strict=True):
                    plugin.fork_ended(token)
                log.warning("a pass could not be forked (%s): decided on the thread", err)
                return None
            fork_s = time.perf_counter() - began
        os.close(write)
        try:
            (result, cpu_s, changes, kept), load_s = self._receive(child)
            if not isinstance(result, PassResult):
                raise PassProcessFailed(f"the pass's process sent {type(result).__name__}")
            # what the pass changed of the framework's own (the running jobs' rows, the
            # waiting jobs' PreFilter calls) and of the plugins' states: the next child
            # starts with them (counted in ``load_s``: the interpreter held, as for the
            # unpickling)
            began = time.perf_counter()
            scheduler.framework.adopt(kept, snapshot)
            self._adopt(child, changes)
            load_s += time.perf_counter() - began
        except BaseException:
            self._kill(child)
            raise
        finally:
            with self._lock:
                self._passing = None
        if result.plan.forecasting:
            self._stop_forecaster()  # (one that went on through a pass without the stage)
            child.jobs, child.deadline = result.plan.forecasting, math.inf
            with self._lock:
                self._forecaster = child
        else:
            self._end(child)
        return dataclasses.replace(result, process=ProcessFacts(fork_s, cpu_s, load_s))

    def _receive(self, child: _Child) -> tuple[tuple[Any, ...], float]:
        """The child's next message, and the seconds its unpickling took."""
        size = _LENGTH.unpack(self._read(child, _LENGTH.size))[0]
        data = self._read(child, size)
        began = time.perf_counter()
        # (our own child's bytes, through a pipe nothing else can write to); without
        # the collector: tens of thousands of updates would set off collections that
        # walk the server's heap
        collecting = gc.isenabled()
        gc.disable()
        try:
            kind, *payload = pickle.loads(data)  # noqa: S301
        finally:
            if collecting:
                gc.enable()
        if kind == "error":
            raise PassProcessFailed(f"the pass failed in its process:\n{payload[0]}")
        return tuple(payload), time.perf_counter() - began

    def _read(self, child: _Child, size: int) -> bytes:
        parts: list[bytes] = []
        left = size
        while left:
            if not child.ready(min(child.deadline - time.monotonic(), self.timeout_s)):
                raise PassProcessFailed(
                    f"the pass's process ran past {self.timeout_s:g} s and was killed"
                )
            part = os.read(child.fd, min(left, 1 << 20))
            if not part:
                status = self._reap(child)
                raise PassProcessFailed(
                    f"the pass's process ended without its result ({_exit_text(status)})"
                )
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    @staticmethod
    def _adopt(child: _Child, changes: Sequence[object]) -> None:
        for plugin, changed, token in zip(child.carried, changes, child.tokens, strict=True):
            plugin.adopt(changed, token)

    def _end(self, child: _Child, changes: Sequence[object] | None = None) -> None:
        """A child that has sent all it had: its last changes taken in, its end
        waited for."""
        try:
            if changes:
                self._adopt(child, changes)
        finally:
            self._close(child)
            self._reap(child)

    def _stop_forecaster(self) -> None:
        with self._lock:
            forecaster, self._forecaster = self._forecaster, None
        if forecaster is not None:
            self._kill(forecaster)

    def _bury(self) -> None:
        """Reap the children ``close`` killed."""
        with self._lock:
            dead, self._dead = self._dead, []
        for child in dead:
            self._kill(child)

    def _kill(self, child: _Child) -> None:
        if not child.reaped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        self._close(child)
        self._reap(child)

    @staticmethod
    def _close(child: _Child) -> None:
        if not child.closed:
            child.closed = True
            os.close(child.fd)
            for plugin, token in zip(child.carried, child.tokens, strict=True):
                plugin.fork_ended(token)

    @staticmethod
    def _reap(child: _Child) -> int | None:
        if child.reaped:
            return None
        try:
            status = os.waitpid(child.pid, 0)[1]
        except ChildProcessError:
            status = None
        child.reaped = True
        return status


def _child_pass(
    scheduler: Scheduler,
    carried: Sequence[PassCarried],
    pipe: tuple[int, int],
    held: contextlib.ExitStack,
    snapshot: ClusterSnapshot,
    options: dict[str, Any],
) -> NoReturn:
    """The child: decide and send the result, then forecast and send each slice, and
    exit (whatever happens: it never returns into the server's code)."""
    code = 0
    read, fd = pipe
    try:
        held.close()  # (the fork locks: this thread's here, let go)
        os.close(read)
        _become_child(keep=fd)
        cpu = time.process_time()
        marks = [plugin.pass_mark() for plugin in carried]
        framework = scheduler.framework
        mark = framework.pass_mark()
        result = scheduler.run_pass(snapshot, **options)
        result = dataclasses.replace(result, settled=None, statuses={})
        changes = [p.pass_changes(m) for p, m in zip(carried, marks, strict=True)]
        kept = framework.pass_changes(mark, snapshot)
        _send(fd, ("result", result, time.process_time() - cpu, changes, kept))
        plan = result.plan
        budget = scheduler.forecast_slice_s
        done = not plan.forecasting
        # the forecast's own changes, apart from the pass's (the parent has those)
        marks = [plugin.pass_mark() for plugin in carried]
        while not done:
            go_on = None
            if budget:
                deadline = time.perf_counter() + budget
                go_on = partial(_before, deadline)
            updates = scheduler.forecast(plan, go_on=go_on)
            done = not scheduler.forecast_left
            changes = [p.pass_changes(m) for p, m in zip(carried, marks, strict=True)]
            _send(fd, ("forecast", updates, done, changes if done else []))
    except BrokenPipeError:
        code = 1  # the parent is gone, or gave up on this pass
    except BaseException:
        code = 1
        with contextlib.suppress(BaseException):
            _send(fd, ("error", traceback.format_exc()))
    finally:
        os._exit(code)


def _before(deadline: float) -> bool:
    return time.perf_counter() < deadline


def _send(fd: int, message: tuple[object, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _become_child(*, keep: int) -> None:
    """What a forked pass's process does first: no collector (the pass turns it off
    anyway, and a collection would walk, and so copy, the parent's whole heap), the
    default signals (the server's handlers write to its event loop's wake-up socket),
    death with the thread that forked it, and none of the parent's sockets held open."""
    gc.disable()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    for fd in _open_sockets():
        if fd != keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _open_sockets() -> Iterator[int]:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        fd = int(name)
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                yield fd
        except OSError:
            continue


def _exit_text(status: int | None) -> str:
    if status is None:
        return "exit status unknown"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


__all__ = [
    "FORK_FROM",
    "CarriesState",
    "ForkLocked",
    "ForkedScheduler",
    "PassCarried",
    "PassProcessFailed",
    "profile_plugins",
]
