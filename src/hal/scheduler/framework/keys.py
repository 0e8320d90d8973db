"""Every key the framework writes or reads in a ``CycleState``: the part of the
framework's state plugins may see, in one place.

Two scopes (``cycle_state.py``): a job's cycle has its own ``CycleState`` (``state``
in every extension point); the pass shares one more, ``PassContext.data``. Plugins keep
their own keys in their own modules; the keys here are the ones
the framework and plugins pass each other, and a plugin imports them from this module
only, never from the runtime or the backfill stage that write them.

Per job (``state``), written by the framework:

* ``PLACEMENT_KEY`` before PreFilter;
* ``FITS`` for PostFilter;
* ``NODE_SCORES`` after Score, for Reserve.

Per job, written by a plugin for the framework:

* ``MAX_NODES`` (PreFilter: a node range's cap), ``JOB_BOUND`` (Filter: a mask that
  depended on more than the placement key).

Per pass (``ctx.data``):

* ``PREEMPTIONS``: written by a PostFilter plugin, read by the pass for the plan;
* ``GROUP``: the jobs being placed together (``Framework.place_group``);
* ``PLAN_START``, ``PLAN_END``: the run backfill is planning;
* ``COUNTS_OVER_TIME``: counted resources backfill has planned to be held, over time;
* ``REQUESTS``: the framework's own cache of node requests (no plugin reads it);
* ``PLACEMENT_NOTES``: written by Reserve plugins, read by the pass for the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hal.core.job import Job
from hal.scheduler.framework.counted import CountsOverTime
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import FloatArray, IndexArray
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.request import NodeRequest, PlacementKey
from hal.scheduler.framework.snapshot import Preemption

# -- per job --------------------------------------------------------------------------

# The job's placement key, written by the runtime before PreFilter for plugins to reuse.
PLACEMENT_KEY: StateKey[PlacementKey] = StateKey("framework.placement_key")
# Written by the runtime for PostFilter: would the job's Filter pass (for some node count
# it accepts) on this other table? The table must be a copy (``NodeTable.copy``).
FITS: StateKey[Callable[[NodeTable], bool]] = StateKey("framework.fits")
# Written by a PreFilter plugin for a job with a node range (``-N 1-4``): the most nodes
# its limits let it have (Slurm caps the range so); the runtime tries no more.
MAX_NODES: StateKey[int] = StateKey("framework.max_nodes")
# Written by a Filter plugin whose mask for this job depended on more than its placement
# key (``exclusiveuser``: the job's user): a failed fit then ends at Stage.PLACEMENT, so
# that neither the pass nor backfill shares it with other jobs of the same key.
JOB_BOUND: StateKey[bool] = StateKey("framework.job_bound")
# Written by the runtime after Score, when the job's nodes were chosen by score (more
# candidates than it needs): the candidate rows and each Score plugin's weighted scores
# over them, by plugin name. A part is a vector over the candidates, or a 0-d array
# where a ``WeightedScorer`` gave the same score to every candidate (then possibly
# shared and read-only: add it, never write it; the first part is always a vector). A
# Reserve plugin reads it to tell whether its own score decided the placement
# (``harmonic``: what ``hal explain`` says of a started job).
NODE_SCORES: StateKey[tuple[IndexArray, Mapping[str, FloatArray]]] = StateKey(
    "framework.node_scores"
)

# -- per pass (``ctx.data``) ----------------------------------------------------------

# The running jobs a PostFilter plugin chose to preempt, victim id → Preemption; the
# pass returns them in ``Plan.preemptions``.
PREEMPTIONS: StateKey[dict[int, Preemption]] = StateKey("framework.preemptions")
# While ``Framework.place_group`` places jobs that start together or not at all (a het
# job's components, by offset): those jobs. A plugin that counts something the jobs hold
# together judges the group's total at the first of them: the cycles of the others see
# neither each other's Reserve in TEST_ONLY (backfill's reservations) nor anything held
# over time.
GROUP: StateKey[tuple[Job, ...]] = StateKey("framework.group")
# While backfill tries a job: the run it plans, from ``PLAN_START`` (absent: the job
# would start at ``ctx.now``) to ``PLAN_END``. Plugins whose verdict depends on when the
# job runs read them (``reservation``: its windows; a CountedResource plugin: its
# counters over that run).
PLAN_START: StateKey[float] = StateKey("framework.plan_start")
PLAN_END: StateKey[float] = StateKey("framework.plan_end")
# Once the backfill stage plans a job holding counters of a ``CountedResourcePlugin``:
# plugin name → its counters held over time (running jobs until their planned ends, jobs
# started or reserved by the stage until theirs).
COUNTS_OVER_TIME: StateKey[Mapping[str, CountsOverTime]] = StateKey("framework.counts_over_time")
# (placement key, node count) → NodeRequest, shared by identical jobs of one pass.
REQUESTS: StateKey[dict[tuple[PlacementKey, int], NodeRequest]] = StateKey("framework.requests")
# Job id → one line saying why the job got its nodes, written by a Reserve plugin whose
# choice decided them (removed by its Unreserve); the pass puts it in the job's
# ``Placement.note``, which the server keeps with the job (``hal explain``, ``hal show``).
PLACEMENT_NOTES: StateKey[dict[int, str]] = StateKey("framework.placement_notes")


def add_placement_note(data: CycleState, job_id: int, note: str) -> None:
    """Say why ``job_id`` got its nodes (after what another plugin said, if it did)."""
    notes = data.get(PLACEMENT_NOTES)
    if notes is None:
        notes = {}
        data.write(PLACEMENT_NOTES, notes)
    before = notes.get(job_id)
    notes[job_id] = f"{before}; {note}" if before else note


def drop_placement_note(data: CycleState, job_id: int) -> None:
    """The job's placement was undone (Unreserve): nothing to say of it any more."""
    notes = data.get(PLACEMENT_NOTES)
    if notes is not None:
        notes.pop(job_id, None)
