"""One call from a trace to results: load, clean, build the cluster and the policy's
scheduler, replay, summarise; and per-job results back to SWF."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hal.core.errors import InvalidRequest
from hal.predict import (
    CONFIGURABLE,
    CORRECTIONS,
    PerfectPredictor,
    Predictor,
    effective_correction,
    planning_predictor,
)
from hal.predict.learned import SIM_TRAIN_LAG
from hal.sim.cluster import ClusterModel
from hal.sim.engine import SimRun, Simulation
from hal.sim.metrics import check_exclusion, summarize
from hal.sim.parallel import parallel_ok, replay
from hal.sim.policies import scheduler_for
from hal.sim.swf import SwfHeader, SwfRecord, write_swf
from hal.sim.topology import leaf_summary, with_topology
from hal.sim.workload import Cleaning, Workload, load_workload

PREDICTORS = ("user", "perfect", "avg2", "learned")


@dataclass(frozen=True, slots=True)
class SimOptions:
    policy: str = "easy"
    predictor: str = "user"
    cores_per_node: int = 1
    exclude_first_fraction: float = 0.0
    check_tables: bool = False
    topology: str = ""  # a synthetic switch tree, e.g. "leaf=16,levels=3" (sim/topology.py)
    topology_aware: bool = True  # False: same tree, placement ignores it (the baseline)
    # What an expired prediction becomes (avg2, learned): "steps" (the stepwise
    # correction, hal.predict.corrected), "request" (the job's requested time), "model"
    # (the predictor's own correction: learned's, else steps) or "default" (learned:
    # model; avg2: steps, Tsafrir's EASY++); the server's ``[scheduler] correction``
    correction: str = "default"
    # Processes to replay on (``hal.sim.parallel``): the same result, split where the
    # simulated machine empties; only for replays that keep no state (``parallel_ok``:
    # the user or perfect predictor, no topology), the others use one.
    workers: int = 1

    def __post_init__(self) -> None:
        check_exclusion(self.exclude_first_fraction)
        if self.workers < 1:
            raise InvalidRequest(
                f"--workers must be 1 or more, not {self.workers}", field="workers"
            )


def make_predictor(name: str, workload: Workload, correction: str = "default") -> Predictor:
    """The predictor a replay plans with: the server's planning policy for the same
    names (``hal.predict.planning_predictor``: ``avg2`` and ``learned`` pinned, an
    expired prediction corrected by ``correction``), or ``perfect``, which knows the
    trace's run times. ``learned`` trains each model ``SIM_TRAIN_LAG`` finished jobs
    before it is used (0: in place when due; more: on a worker thread,
    deterministically, whatever the thread's timing)."""
    if correction not in CORRECTIONS:
        raise InvalidRequest(f"correction must be one of {', '.join(CORRECTIONS)}")
    if name == "perfect":
        return PerfectPredictor({j.id: j.run for j in workload.jobs})
    if name not in CONFIGURABLE:
        raise InvalidRequest(f"unknown predictor {name!r}; choose from {', '.join(PREDICTORS)}")
    return planning_predictor(name, correction, train_lag=SIM_TRAIN_LAG)


def run_workload(workload: Workload, options: SimOptions) -> tuple[SimRun, dict[str, Any]]:
    if not workload.jobs:
        raise InvalidRequest(
            f"no job is left to replay: the cleaning dropped the trace's {workload.dropped}"
            " records"
            " (run time or size 0 or less: --keep-invalid keeps them; larger than the"
            " machine with --drop-oversize: leave it out to cap them)"
            if workload.dropped
            else "the trace holds no job records"
        )
    predictor = make_predictor(options.predictor, workload, options.correction)
    scheduler = scheduler_for(options.policy, predictor)
    cluster = ClusterModel.for_procs(workload.machine_procs, options.cores_per_node)
    recorder = None
    if options.topology:
        cluster, recorder = with_topology(
            cluster, scheduler, options.topology, aware=options.topology_aware
        )
        scheduler = recorder
    split = None
    if (
        options.workers > 1
        and recorder is None
        and not options.check_tables
        and parallel_ok(predictor)
    ):
        run, split = replay(
            workload.jobs,
            cluster,
            lambda: scheduler_for(options.policy, predictor),
            predictor,
            options.workers,
        )
    if split is None:
        sim = Simulation(
            workload.jobs,
            cluster,
            scheduler,
            predictor=predictor,
            check_tables=options.check_tables,
        )
        run = sim.run()
    summary = summarize(run, options.exclude_first_fraction)
    summary.update(
        policy=options.policy,
        predictor=options.predictor,
        machine_procs=workload.machine_procs,
        nodes=cluster.nodes,
        cores_per_node=cluster.cores_per_node,
        trace_jobs=len(workload.jobs),
        dropped=workload.dropped,
        capped=workload.capped,
        passes=run.passes,
        skipped_passes=run.skipped_passes,
        workers=1 if split is None else len(split.starts),
    )
    if split is not None:
        # where the result's parts came from, and the CPU all workers spent
        summary.update(handovers=[first for _, first, _ in split.chain[1:]], cpu_s=split.cpu_s)
    if options.predictor in ("avg2", "learned"):
        summary["correction"] = effective_correction(options.predictor, options.correction)
    if recorder is not None:
        summary.update(
            topology=options.topology,
            topology_aware=options.topology_aware,
            **leaf_summary(cluster, recorder),
        )
    return run, summary


def run_trace(
    path: str | Path, options: SimOptions, cleaning: Cleaning | None = None
) -> tuple[SimRun, dict[str, Any]]:
    workload = load_workload(path, cleaning)
    return run_workload(workload, options)


def write_results(path: str | Path, header: SwfHeader, run: SimRun, note: str) -> None:
    """Per-job results as SWF: the trace's lines with the simulated wait (field 3) and run
    time (field 4); jobs that never ran get -1. The header's ``MaxProcs`` is the machine
    replayed (``--procs`` may differ from the trace's), so that the file reads back as the
    jobs replayed."""
    records: list[SwfRecord] = []
    for o in run.outcomes:
        ran = o.start == o.start  # not NaN
        records.append(
            replace(
                o.job.record,
                submit=o.job.submit,
                wait=o.start - o.job.submit if ran else -1,
                run=o.end - o.start if ran else -1,
                procs_alloc=o.job.procs,
                time_req=o.job.requested,
            )
        )
    write_swf(path, SwfHeader([*_sized(header, run.machine_procs), ("", note)]), records)


def _sized(header: SwfHeader, procs: int) -> list[tuple[str, str]]:
    """``header``'s lines with ``MaxProcs: procs`` in place of its own (first if none)."""
    lines = [(k, v) for k, v in header.lines if k.lower() != "maxprocs"]
    given = header.get("MaxProcs")
    if given is not None and header.get_int("MaxProcs") != procs:
        lines.append(("", f"MaxProcs of the trace: {given}"))
    at = next((i for i, (k, _) in enumerate(header.lines) if k.lower() == "maxprocs"), 0)
    return [*lines[:at], ("MaxProcs", str(procs)), *lines[at:]]
