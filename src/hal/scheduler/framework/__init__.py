"""The scheduling framework: extension points, Status, CycleState and its keys, the
NodeTable, plugin registry and profiles, the placement runtime and the ``Scheduler``
pass (its stages, the backfill planner, the group-placement seam).

Owns the pure decision logic's skeleton. Knows no resource by name: what is on nodes is
the NodeTable's, what is counted cluster-wide is a ``CountedResourcePlugin``'s. Plugins
see the extension points (``interfaces``), ``PassContext``, ``CycleState`` and the keys
the framework shares with them (``keys``), never the runtime or the stages.

Imports only ``hal.core`` (and numpy): never plugins, state, api or anything with I/O.
The default plugin set and the ``build_scheduler`` factory live in
``hal.scheduler.plugins``, because the framework may not import plugins.
"""

from hal.scheduler.framework.availability import AvailabilityProfile
from hal.scheduler.framework.backfill import run_backfill
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import Counts, CountsOverTime
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.grouping import GroupPlacement
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    BackfillMode,
    BackfillPlugin,
    BackfillPolicy,
    CountedResourcePlugin,
    FilterPlugin,
    FilterResult,
    PermitPlugin,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PostFilterPlugin,
    PreFilterPlugin,
    PreFilterWaiver,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
    WeightedScorer,
)
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.planner import BackfillResult
from hal.scheduler.framework.profile import (
    PluginArgsError,
    Profile,
    ProfileError,
    Registry,
    build_profile,
)
from hal.scheduler.framework.request import NodeRequest, placement_key
from hal.scheduler.framework.runtime import Framework, Mode, Outcome, Stage, WillRunResult
from hal.scheduler.framework.scheduler import PassResult, Scheduler
from hal.scheduler.framework.snapshot import (
    ClusterSnapshot,
    PendingUpdate,
    Placement,
    Plan,
    Termination,
)
from hal.scheduler.framework.status import Code, Status

__all__ = [
    "MAX_NODE_SCORE",
    "AvailabilityProfile",
    "BackfillMode",
    "BackfillPlugin",
    "BackfillPolicy",
    "BackfillResult",
    "ClusterSnapshot",
    "Code",
    "CountedResourcePlugin",
    "Counts",
    "CountsOverTime",
    "CycleState",
    "FilterPlugin",
    "FilterResult",
    "Framework",
    "GroupPlacement",
    "Mode",
    "NodeRequest",
    "NodeTable",
    "Outcome",
    "PassContext",
    "PassResult",
    "PendingUpdate",
    "PermitPlugin",
    "Placement",
    "PlacementGeneratePlugin",
    "PlacementScorePlugin",
    "Plan",
    "Plugin",
    "PluginArgsError",
    "PostFilterPlugin",
    "PreFilterPlugin",
    "PreFilterWaiver",
    "PreScorePlugin",
    "Profile",
    "ProfileError",
    "QueueSortPlugin",
    "Registry",
    "ReservePlugin",
    "Scheduler",
    "ScoreNormalizer",
    "ScorePlugin",
    "Stage",
    "StateKey",
    "Status",
    "Termination",
    "WeightedScorer",
    "WillRunResult",
    "build_profile",
    "placement_key",
    "run_backfill",
]
