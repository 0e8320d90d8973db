"""The ``sdiag`` command: the scheduler's statistics in Slurm 22.05's layout, compared
line by line with the real sdiag of a private Slurm 22.05 (``hal.bench.slurm_peer``):
times in microseconds, means (the server's, integer divisions) only once there was a cycle,
``Last cycle when: N/A`` before the first backfill cycle; the ``Cycles per minute``
line only after a minute (from memory of ``sdiag.c``). From ``GET /v1/diag``.

"Data since" is the control plane's start: HAL's counters are never reset (no
``sdiag -r``). Only lines HAL has a number for are printed; the rest of Slurm's
(thread and agent counts, the DBD queue, heterogeneous backfilled components, the
backfill "try sched" depth, queue length and table size, the gettimeofday latency and the
RPC statistics) are left out rather than printed as made-up zeros (docs/observability.md).
A main "cycle" is one whole scheduling pass: the backfill stage of the passes that run
it is in its time too (Slurm's backfill runs in a thread of its own).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol, cast

from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError

if TYPE_CHECKING:
    from hal.wire.diag import SchedulerDiag

OPTIONS = (
    Opt("all", ("all",), "a", Arg.NONE),
    Opt("reset", ("reset",), "r", Arg.NONE),
    Opt("sort_id", ("sort-by-id",), "i", Arg.NONE),
    Opt("sort_time", ("sort-by-time",), "t", Arg.NONE),
    Opt("sort_time2", ("sort-by-time2",), "T", Arg.NONE),
    Opt("cluster", ("cluster",), "M"),
    Opt("help", ("help",), "h", Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)
STARS = "*" * 55


class DiagClient(Protocol):
    def diag(self) -> SchedulerDiag: ...


def _when(epoch: float) -> str:
    """``Thu Nov 26 02:32:48 2026 (1764124368)``: Slurm's slurm_ctime2, local time."""
    seconds = int(epoch)
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(seconds))} ({seconds})"


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def sdiag_lines(d: SchedulerDiag) -> list[str]:
    lines = [
        STARS,
        f"sdiag output at {_when(d.now)}",
        f"Data since      {_when(d.since)}",
        STARS,
        f"Jobs submitted: {d.jobs_submitted}",
        f"Jobs started:   {d.jobs_started}",
        f"Jobs completed: {d.jobs_completed}",
        f"Jobs canceled:  {d.jobs_canceled}",
        f"Jobs failed:    {d.jobs_failed}",
        "",
        f"Job states ts:  {_when(d.now)}",
        f"Jobs pending:   {d.jobs_pending}",
        f"Jobs running:   {d.jobs_running}",
        "",
        "Main schedule statistics (microseconds):",
        f"\tLast cycle:   {_us(d.last_cycle_s)}",
        f"\tMax cycle:    {_us(d.max_cycle_s)}",
        f"\tTotal cycles: {d.cycles}",
    ]
    if d.cycles > 0:
        lines.append(f"\tMean cycle:   {d.mean_cycle_us}")
        lines.append(f"\tMean depth cycle:  {d.mean_depth}")
    minutes = (int(d.now) - int(d.since)) // 60
    if int(d.now) - int(d.since) > 60 and minutes > 0:
        lines.append(f"\tCycles per minute: {d.cycles // minutes}")
    lines += [
        f"\tLast queue length: {d.last_queue_length}",
        "",
        "Backfilling stats",
        f"\tTotal backfilled jobs (since last slurm start): {d.backfill_jobs}",
        f"\tTotal backfilled jobs (since last stats cycle start): {d.backfill_jobs}",
        f"\tTotal cycles: {d.backfill_cycles}",
        # (observed with Slurm 22.05: N/A before the first backfill cycle)
        f"\tLast cycle when: {_when(d.backfill_last_when) if d.backfill_last_when else 'N/A'}",
        f"\tLast cycle: {_us(d.backfill_last_cycle_s)}",
        f"\tMax cycle:  {_us(d.backfill_max_cycle_s)}",
    ]
    if d.backfill_cycles > 0:
        lines.append(f"\tMean cycle: {d.backfill_mean_cycle_us}")
    lines.append(f"\tLast depth cycle: {d.backfill_last_depth}")
    if d.backfill_cycles > 0:
        lines.append(f"\tDepth Mean: {d.backfill_mean_depth}")
    return lines


def sdiag(argv: list[str], console: Console) -> int:
    try:
        parsed = parse_options(argv, OPTIONS)
    except OptionError as err:
        return console.error(err.for_command("sdiag"))
    opts = {dest: value for dest, value, _ in parsed.values}
    if {"help", "usage", "version"} & opts.keys():
        console.out("Usage: sdiag [-a] [-i|-t|-T] [-M cluster]")
        return 0
    if "reset" in opts:
        return console.error(
            "HAL's statistics count from the server's start and are not reset "
            "(sdiag -r is not supported); the same counters are on /metrics"
        )
    if parsed.positionals:
        return console.error(f"Unrecognized argument: {parsed.positionals[0]}")
    try:
        found = cast(DiagClient, console.client).diag()
    except HalError as err:
        return console.error(err.message)
    for line in sdiag_lines(found):
        console.out(line)
    return 0
