"""The scheduler's plugins, one package each, and the default wiring.

Plugins import only ``hal.scheduler.framework`` and ``hal.core``. This package is also
where the registry of built-in plugins and the ``build_scheduler`` factory live: the
framework may not import plugins, so the place that knows them all is here.

The default profile, in call order (PreFilter runs in this order, so the reason a user
sees is that of the first plugin that objects)::

    priority       QueueSort  priority desc, submit time, id
    hold           PreFilter  JobHeldAdmin / JobHeldUser / BeginTime
    partition      PreFilter  PartitionDown / PartitionTimeLimit / PartitionNodeLimit
                   Filter     the partition's nodes
    dependency     PreFilter  Dependency / DependencyNeverSatisfied (+ Termination)
                   Reserve    singleton bookkeeping
    arraythrottle  PreFilter  JobArrayTaskLimit;  Reserve: count placed elements
    noderesources  PreFilter  BadConstraints / ReqNodeNotAvail (static mask per key)
                   Filter     cpus, memory, gpus, exclusive → Resources
                   Score      best fit

    topology       PreFilter  BadConstraints (unknown or too small --topology level)
                   Placement  multi-node jobs: one leaf switch, else fewest leaves
                              under the lowest switch; Topology (--switches wait)
                   (only when the cluster has a topology: ``default_profile(topology=...)``)

Registered but not in the default profile: ``backfill`` (EASY / conservative per
partition; add it to ``plugins`` to enable it).
"""

from __future__ import annotations

from collections.abc import Mapping

from hal.core.topology import Topology
from hal.scheduler.framework.profile import Registry, build_profile
from hal.scheduler.framework.scheduler import Scheduler
from hal.scheduler.plugins import (
    arraythrottle,
    backfill,
    dependency,
    hold,
    noderesources,
    partition,
    priority,
)
from hal.scheduler.plugins import topology as topology_plugin

DEFAULT_PLUGINS = (
    priority.NAME,
    hold.NAME,
    partition.NAME,
    dependency.NAME,
    arraythrottle.NAME,
    noderesources.NAME,
)


def default_registry() -> Registry:
    """Every built-in plugin, by name."""
    return Registry(
        {
            priority.NAME: priority.new,
            hold.NAME: hold.new,
            partition.NAME: partition.new,
            dependency.NAME: dependency.new,
            arraythrottle.NAME: arraythrottle.new,
            noderesources.NAME: noderesources.new,
            backfill.NAME: backfill.new,
            topology_plugin.NAME: topology_plugin.new,
        }
    )


def default_profile(*, topology: Topology | None = None) -> dict[str, object]:
    """The default profile as a plain config mapping (a fresh copy to edit). With a
    ``topology`` (the cluster has one configured), the ``topology`` plugin is added
    with the tree's level names."""
    plugins = list(DEFAULT_PLUGINS)
    args: dict[str, object] = {noderesources.NAME: {"score": "best_fit"}}
    if topology is not None:
        plugins.append(topology_plugin.NAME)
        args[topology_plugin.NAME] = {"level_names": list(topology.level_names)}
    return {
        "name": "default",
        "plugins": plugins,
        "score_weights": {noderesources.NAME: 1},
        "plugin_args": args,
    }


def build_scheduler(
    config: Mapping[str, object] | None = None, registry: Registry | None = None
) -> Scheduler:
    """A ``Scheduler`` for ``config`` (``default_profile()`` when None). Raises
    ``ProfileError`` naming the bad field."""
    profile = build_profile(
        default_profile() if config is None else config, registry or default_registry()
    )
    return Scheduler(profile)


__all__ = ["DEFAULT_PLUGINS", "build_scheduler", "default_profile", "default_registry"]
