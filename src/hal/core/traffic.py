"""Who talks to whom: the traffic graph as the scheduler sees it.

Node agents measure each running job's TCP traffic (``hal.agent.traffic``); the control
plane resolves both ends of every connection to jobs and keeps a decayed graph of the
bytes per second between them (``hal.server.traffic``). The graph is kept twice: between
running jobs, and between *workload identities* (``identity``: the user and the job's
name, or the label the user gave it), so that a new submission of a workload that has
been seen before already knows its peers.

A ``TrafficView`` is that graph at one moment, read-only, for the scheduler's
``harmonic`` plugin (and ``hal explain``): the simulator builds one from its
communication model, the server from what agents measured.

Pure: imports nothing outside the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

LABEL_PREFIX = "harmonic="  # --comment=harmonic=LABEL names a job's workload identity


def identity(user: str, name: str, comment: str = "") -> str:
    """The workload a job belongs to: ``user/LABEL`` when its comment carries
    ``harmonic=LABEL`` (one of its words), else ``user/NAME``. Jobs of one array share a
    name, so they share an identity; so do resubmissions of the same script."""
    for word in comment.split():
        if word.startswith(LABEL_PREFIX) and len(word) > len(LABEL_PREFIX):
            return f"{user}/{word[len(LABEL_PREFIX) :]}"
    return f"{user}/{name}"


@dataclass(frozen=True, slots=True)
class TrafficView:
    """The graph at one moment. ``identities`` maps each job the graph has seen (running
    ones at least) to its identity; ``between`` holds, per identity, the decayed bytes
    per second (both directions together) to each peer identity, symmetric. A job with
    no entry in ``between`` has no known peers (nothing measured, or traffic HAL cannot
    see: RDMA, a host outside the cluster)."""

    identities: Mapping[int, str] = field(default_factory=dict)
    between: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def peers(self, of: str) -> Mapping[str, float]:
        """Bytes per second from identity ``of`` to each of its peers."""
        return self.between.get(of, {})
