"""The ``sdiag`` command: the scheduler's statistics in Slurm 22.05's layout, compared
line by line with the real sdiag of a private Slurm 22.05.8 (``hal.bench.slurm_peer``;
docs/slurm-checks.md): times in microseconds, means (the server's, integer
divisions) only once there was a cycle, ``Last cycle when: N/A`` before the first
backfill cycle; the ``Cycles per minute`` line only after a minute. From ``GET /v1/diag``.

"Data since" is the control plane's start, or the last ``sdiag -r`` (administrators;
Slurm's ``Reset scheduling statistics``), which zeroes what Slurm's reset zeroes and
leaves ``/metrics`` alone. The lines HAL has a true number for:

- ``Server thread count``: the requests the server is handling now, this one included
  (HAL serves them on one event loop, not a thread each, so this is Slurm's meaning, the
  requests in progress, not a count of threads);
- ``Agent queue size``: instructions (launch, signal, cancel ...) waiting for their
  agents to take them; ``DBD Agent queue size`` is 0: HAL commits every change to its
  database before it answers, and keeps no queue of writes for later;
- the backfill stage's ``Last queue length`` and ``Queue length mean``: the jobs handed to
  it (the same numbers as its depth: HAL does not count the jobs it tried apart);
- the RPC statistics: the server's requests by kind (Slurm's message type where a route
  has one, else ``METHOD /route`` and 0) and by user (the uid where this host knows the
  name, else the name), most first; "Pending RPC statistics" only while no instruction
  waits (HAL does not list waiting instructions as Slurm lists its pending RPCs).

Left out rather than printed as made-up zeros: ``Agent count``, ``Agent thread count``,
heterogeneous backfilled components, the "try sched" depths, the table sizes and the
gettimeofday latency (docs/admin/observability.md). A main "cycle" is one whole scheduling
pass: the backfill stage of the passes that run it is in its time too (Slurm's backfill
runs in a thread of its own).
"""

from __future__ import annotations

import pwd
import time
from typing import TYPE_CHECKING, Protocol, cast

from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.core.errors import HalError, PermissionDenied

if TYPE_CHECKING:
    from hal.wire.diag import RpcCount, SchedulerDiag

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

    def reset_diag(self) -> None: ...


def _when(epoch: float) -> str:
    """``Thu Nov 26 02:32:48 2026 (1764124368)``: Slurm's slurm_ctime2, local time."""
    seconds = int(epoch)
    return f"{time.strftime('%a %b %d %H:%M:%S %Y', time.localtime(seconds))} ({seconds})"


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def sdiag_lines(d: SchedulerDiag) -> list[str]:
    last, longest, _, mean = d.main_schedule()
    lines = [
        STARS,
        f"sdiag output at {_when(d.now)}",
        f"Data since      {_when(d.since)}",
        STARS,
        *_server_lines(d),
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
        f"\tLast cycle:   {_us(last)}",
        f"\tMax cycle:    {_us(longest)}",
        f"\tTotal cycles: {d.cycles}",
    ]
    if d.cycles > 0:
        lines.append(f"\tMean cycle:   {mean}")
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
    lines.append(f"\tLast queue length: {d.backfill_last_depth}")
    if d.backfill_cycles > 0:
        lines.append(f"\tQueue length mean: {d.backfill_mean_depth}")
    return lines + _forecast_lines(d) + _loop_lines(d) + _rpc_lines(d)


def _forecast_lines(d: SchedulerDiag) -> list[str]:
    """HAL's own block (Slurm has none): the forecast's slices, run after a pass's plan
    is applied, and the cycles they make with their passes (none from a server that
    does not count them apart)."""
    if d.forecast_slices is None:
        return []
    lines = [
        "",
        "Forecast statistics (microseconds):",
        f"\tTotal slices: {d.forecast_slices}",
        f"\tLast slice:   {_us(d.last_forecast_slice_s or 0.0)}",
        f"\tMax slice:    {_us(d.max_forecast_slice_s or 0.0)}",
        f"\tLast cycle with its slice: {_us(d.last_cycle_s)}",
        f"\tMax cycle with its slice:  {_us(d.max_cycle_s)}",
    ]
    if d.passes_capped is not None:
        lines += [
            f"\tPasses stopped at max_job_starts: {d.passes_capped}",
            f"\tPasses stopped there that backfilled: {d.passes_capped_backfilled or 0}",
        ]
    return lines


def _loop_lines(d: SchedulerDiag) -> list[str]:
    """HAL's own block: the event loop's longest lag since the start or ``sdiag -r``
    (none from a server that does not measure it)."""
    if d.max_event_loop_lag_s is None:
        return []
    return [
        "",
        "Event loop statistics (microseconds):",
        f"\tMax lag:      {_us(d.max_event_loop_lag_s)}",
    ]


def _server_lines(d: SchedulerDiag) -> list[str]:
    """The block above the job counts (none from a server too old to count them)."""
    if d.requests_in_flight is None:
        return []
    lines = [f"Server thread count:  {d.requests_in_flight}"]
    if d.agent_queue_size is not None:
        lines.append(f"Agent queue size:     {d.agent_queue_size}")
    return [*lines, "DBD Agent queue size: 0", ""]


def _uid(user: str) -> str:
    try:
        return str(pwd.getpwnam(user).pw_uid)
    except KeyError:
        return user


def _rpc_row(row: RpcCount, label: str) -> str:
    total = _us(row.total_s)
    ave = total // row.count if row.count else 0
    return f"\t{label} count:{row.count:<6} ave_time:{ave:<6} total_time:{total}"


def _rpc_lines(d: SchedulerDiag) -> list[str]:
    """Slurm's ``%-40s(%5u)`` and ``%-16s(%8u)`` rows (the exporters' regular expressions
    read them as sdiag prints them)."""
    if d.requests_in_flight is None:
        return []
    lines = ["", "Remote Procedure Call statistics by message type"]
    lines += [_rpc_row(r, f"{r.name:<40}({r.id:5})") for r in d.rpc_by_type]
    lines += ["", "Remote Procedure Call statistics by user"]
    lines += [_rpc_row(r, f"{r.name:<16}({_uid(r.name):>8})") for r in d.rpc_by_user]
    if d.agent_queue_size == 0:
        lines += ["", "Pending RPC statistics", "\tNo pending RPCs"]
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
    if parsed.positionals:
        return console.error(f"Unrecognized argument: {parsed.positionals[0]}")
    client = cast(DiagClient, console.client)
    if "reset" in opts:
        try:
            client.reset_diag()
        except PermissionDenied:
            console.err("slurm_reset_statistics: Access/permission denied")  # Slurm's words
            return 1
        except HalError as err:
            return console.error(err.message)
        console.out("Reset scheduling statistics")
        return 0
    try:
        found = client.diag()
    except HalError as err:
        return console.error(err.message)
    for line in sdiag_lines(found):
        console.out(line)
    return 0
