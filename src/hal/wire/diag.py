"""REST schema of ``GET /v1/diag`` (``sdiag``): the scheduler's statistics since the
control plane started, the numbers its ``/metrics`` counts. Times are seconds."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class RpcCount(WireModel):
    """One row of sdiag's RPC statistics: a request kind (Slurm's message type and its
    number, or HAL's route and 0) or a user (number 0), and its requests."""

    name: str
    id: int = 0
    count: int
    total_s: float


class SchedulerDiag(WireModel):
    now: float
    since: float  # when this server started (the counters count from there)
    # jobs since then: submitted (array elements one each), attempts started, and ends
    # as Slurm 22.05 counts them: completed (the script ended: COMPLETED, FAILED,
    # OUT_OF_MEMORY), canceled (CANCELLED), failed (NODE_FAIL, BOOT_FAIL); TIMEOUT,
    # DEADLINE and PREEMPTED ends count in none (hal.server.observe.diag)
    jobs_submitted: int
    jobs_started: int
    jobs_completed: int
    jobs_canceled: int
    jobs_failed: int
    jobs_pending: int  # now
    jobs_running: int  # now (running, suspended or completing)
    # the scheduling cycles: each a pass (its main loop, and the backfill stage when it
    # ran) and the forecast slice run after its plan was applied, when one was due; the
    # pass alone and the slices alone below (``last_pass_s``, ``forecast_slices``)
    cycles: int
    last_cycle_s: float
    max_cycle_s: float
    total_cycle_s: float
    total_depth: int  # pending jobs handed to the passes, summed
    last_queue_length: int  # pending jobs handed to the last pass
    # the backfill stage
    backfill_jobs: int  # jobs it started
    backfill_cycles: int
    backfill_last_when: float  # 0: it never ran
    backfill_last_cycle_s: float
    backfill_max_cycle_s: float
    backfill_total_cycle_s: float
    backfill_last_depth: int  # jobs handed to the last stage
    backfill_total_depth: int
    # the means, once for sdiag and any other reader: Slurm's integer divisions of the
    # microsecond sums (and of the depths) by the cycles; 0 before the first cycle
    mean_cycle_us: int = 0
    mean_depth: int = 0
    backfill_mean_cycle_us: int = 0
    backfill_mean_depth: int = 0
    # The fields below came later (None or empty from an older server: left out).
    # requests the server is handling now, this one included (sdiag's "Server thread
    # count": HAL serves them on one event loop, not a thread each)
    requests_in_flight: int | None = None
    # instructions (launch, signal, cancel ...) waiting for their agents to take them
    # (sdiag's "Agent queue size": Slurm's messages queued to its slurmds)
    agent_queue_size: int | None = None
    rpc_by_type: list[RpcCount] = Field(default_factory=list)
    rpc_by_user: list[RpcCount] = Field(default_factory=list)
    # the passes alone, without the forecast slices (sdiag's main schedule statistics):
    # the last, the longest, their sum and Slurm's integer mean over ``cycles``
    last_pass_s: float | None = None
    max_pass_s: float | None = None
    total_pass_s: float | None = None
    mean_pass_us: int | None = None
    # the forecast's slices (bf_yield_interval each, one a cycle at most): how many, the
    # last (0 before the first since the reset) and the longest
    forecast_slices: int | None = None
    last_forecast_slice_s: float | None = None
    max_forecast_slice_s: float | None = None
    # the passes that passed over a partition's jobs at max_job_starts, and those of them
    # that ran the backfill stage all the same (its turn once bf_interval passed)
    passes_capped: int | None = None
    passes_capped_backfilled: int | None = None
    # the event loop's longest lag (``hal_event_loop_lag_seconds``): how much later than
    # asked a task sleeping 0.1 s on it woke, the longest a request waited to be looked at
    max_event_loop_lag_s: float | None = None
    # what the longest pass since the reset was made of (hal.server.observe.passes): its
    # wait for a worker, its CPU, its stages, full collections in it, what it decided
    max_pass_breakdown: dict[str, float | int | bool | None] | None = None

    def main_schedule(self) -> tuple[float, float, float, int]:
        """The passes' last, longest, summed (seconds) and mean (µs) duration: Slurm's
        main schedule statistics; the cycles' from a server that does not count the
        passes alone."""
        if (
            self.last_pass_s is None
            or self.max_pass_s is None
            or self.total_pass_s is None
            or self.mean_pass_us is None
        ):
            return self.last_cycle_s, self.max_cycle_s, self.total_cycle_s, self.mean_cycle_us
        return self.last_pass_s, self.max_pass_s, self.total_pass_s, self.mean_pass_us
