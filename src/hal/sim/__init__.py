"""Trace-driven simulator: SWF reader/writer, workload cleaning, a virtual cluster and
clock, the event loop, metrics and plots.

Runs the real scheduler (``hal.scheduler``'s framework and plugins, through
``ClusterSnapshot`` → ``Plan``), not a copy. Imports ``hal.core``, ``hal.scheduler`` and
``hal.predict`` only, and the autoscaler's pure decisions (``hal.cloud.autoscaler``,
``hal.cloud.burst``) for the cloud replay (``hal.sim.cloud``): never the server (api,
state, agent), the client or the CLI (checked by import-linter). ``run_trace`` is the
one-call entry point.
"""

from hal.sim.cluster import ClusterModel
from hal.sim.engine import JobOutcome, SimRun, Simulation
from hal.sim.metrics import KEYS, summarize
from hal.sim.policies import POLICIES, scheduler_for
from hal.sim.run import PREDICTORS, SimOptions, run_trace, run_workload
from hal.sim.swf import SwfHeader, SwfRecord, read_swf, write_swf
from hal.sim.workload import Cleaning, TraceJob, Workload, load_workload

__all__ = [
    "KEYS",
    "POLICIES",
    "PREDICTORS",
    "Cleaning",
    "ClusterModel",
    "JobOutcome",
    "SimOptions",
    "SimRun",
    "Simulation",
    "SwfHeader",
    "SwfRecord",
    "TraceJob",
    "Workload",
    "load_workload",
    "read_swf",
    "run_trace",
    "run_workload",
    "scheduler_for",
    "summarize",
    "write_swf",
]
