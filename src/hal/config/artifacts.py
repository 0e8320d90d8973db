"""``[artifacts]`` of ``hal.toml``: the nodes' artifact caches and the canaries of artifact
aliases (docs/user/artifacts.md).

Example (the defaults but ``node_cache``)::

    [artifacts]
    node_cache = "50G"             # each node's copies and Python environments within this;
                                   # sent to the agents when they register, over their
                                   # --artifact-cache (unset: each agent's own, 10G)
    canary_min_jobs = 5            # ended jobs on the canary and on the version before it
                                   # before the canary is judged
    canary_alpha = 0.01            # the rank-sum test's p-value under which a canary that
                                   # fails more often is rolled back
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hal.config.priority import fail, unknown_key, whole_number
from hal.core.errors import InvalidRequest
from hal.slurm.syntax import parse_memory

ARTIFACTS_KEYS = ("node_cache", "canary_min_jobs", "canary_alpha")
LEAST_CACHE = 1024 * 1024  # a cache smaller than 1 MiB holds nothing a job would run


@dataclass(frozen=True, slots=True)
class ArtifactsConfig:
    node_cache_bytes: int | None = None  # None: each agent keeps its --artifact-cache
    canary_min_jobs: int = 5
    canary_alpha: float = 0.01


def artifacts_from_table(table: Any, source: str) -> ArtifactsConfig:
    if not isinstance(table, dict):
        raise fail(source, "artifacts", 'must be a table: [artifacts] node_cache = "50G"')
    for key in table:
        if key not in ARTIFACTS_KEYS:
            raise fail(source, f"artifacts.{key}", unknown_key(key, ARTIFACTS_KEYS))
    config = ArtifactsConfig()
    cache = config.node_cache_bytes
    if "node_cache" in table:
        value = table["node_cache"]
        try:
            cache = parse_memory(str(value)) if isinstance(value, str) else None
        except InvalidRequest:
            cache = None
        if cache is None or cache < LEAST_CACHE:
            raise fail(
                source,
                "artifacts.node_cache",
                f'must be a size of at least 1M, such as "50G" or "500M" (got {value!r})',
            )
    least = whole_number(
        table.get("canary_min_jobs", config.canary_min_jobs), source, "artifacts.canary_min_jobs", 1
    )
    alpha = table.get("canary_alpha", config.canary_alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise fail(
            source, "artifacts.canary_alpha", f"must be a p-value between 0 and 1 (got {alpha!r})"
        )
    return ArtifactsConfig(node_cache_bytes=cache, canary_min_jobs=least, canary_alpha=float(alpha))
