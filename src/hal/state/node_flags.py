"""A node's state flags: what Slurm adds to a node's base state (``idle``, ``mix``,
``down`` ...), which ``sinfo`` shows as a suffix (``idle*``, ``alloc$``) and the REST API
as ``NodeInfo.state_flags``.

HAL knows four of Slurm's flags:

- ``NOT_RESPONDING`` (``*``): the node's agent has not synced for ``not_responding_after``
  seconds, or has no session at all (a node declared down for silence, an agent that has
  not registered since the server started). The node keeps its base state until the node
  timeout declares it down (``agents.check_nodes``), then shows ``down*``.
- ``MAINTENANCE`` (``$``, or the state ``maint`` for an idle node): the node is in a
  reservation with ``Flags=MAINT`` whose window is open now; it is ``RESERVED`` too, as
  Slurm 22.05.8 shows it (``State=IDLE+MAINTENANCE+RESERVED``, ``sinfo -t resv``).
- ``RESERVED`` (the state ``resv`` for an idle node): the node is in a reservation whose
  window is open now.
- ``DRAIN`` on a DOWN node only: a drained node an operator set DOWN (``Node.drain``),
  ``State=DOWN+DRAIN`` and sinfo's ``drained``. A drained or draining node that is not
  down says so in its base state (``drain``, ``drng``), which implies the flag.

The nodes of ``[cloud]`` groups carry Slurm's flags of cloud nodes, which the API adds
(``hal.api.cloud_nodes``; the node model knows no groups): ``CLOUD`` on each of them,
and on a name with no registered node ``POWERED_DOWN`` (``~``, no instance),
``POWERING_UP`` (``#``, an instance whose agent has not joined yet, also
``NOT_RESPONDING`` as in Slurm 22.05.8) or ``POWERING_DOWN`` (``%``, an instance being
removed). HAL has no reboot requests, so Slurm's ``@ ^`` never appear.

Owned nodes that sleep (``[power]``, ``hal.core.power``) carry the flag of their power
phase: ``POWER_DOWN`` (``!``, a power-down requested while jobs run), ``POWERING_DOWN``
(``%``), ``POWERED_DOWN`` (``~``) or ``POWERING_UP`` (``#``). Such a node is drained in
its record (so nothing lands on it); it shows the base state it would have up
(``idle~``, ``mix!``), and a node asleep is not "not responding" (its agent is off by
design).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hal.core.node import Node
from hal.core.power import Phase, phase_of
from hal.core.states import NodeState

if TYPE_CHECKING:
    from hal.config.model import HalConfig
    from hal.state.cluster import Cluster

NOT_RESPONDING = "NOT_RESPONDING"
MAINTENANCE = "MAINTENANCE"
RESERVED = "RESERVED"
DRAIN = "DRAIN"
CLOUD = "CLOUD"
POWERED_DOWN = "POWERED_DOWN"
POWERING_UP = "POWERING_UP"
POWERING_DOWN = "POWERING_DOWN"
POWER_DOWN = "POWER_DOWN"


def not_responding_after(config: HalConfig) -> float:
    """Seconds of silence after which an agent is not responding.

    A healthy agent's silence never exceeds the server's hold of its long poll
    (``agents.sync``: at most the heartbeat interval and a third of the node timeout), so
    twice the interval means at least one heartbeat was missed; half the node timeout at
    most, so the flag shows well before the node is declared down.
    """
    return min(2 * config.heartbeat_interval_seconds, config.node_timeout_seconds / 2)


def last_contact(cluster: Cluster, node: Node) -> float | None:
    """When the node's agent was last heard from (its registration or its latest sync:
    ``scontrol show node``'s ``LastHeartbeat=``); None without a session since the server
    started."""
    session = cluster.agent_sessions.get(node.name)
    return max(node.last_heartbeat, session.last_seen) if session is not None else None


def node_state_flags(cluster: Cluster, node: Node) -> list[str]:
    """The flags of ``node`` now, in Slurm's order of precedence for the suffix
    (maintenance first)."""
    now = cluster.clock.now()
    flags: list[str] = []
    open_now = [r for r in cluster.reservations.values() if node.name in r.nodes and r.active(now)]
    if any(r.maintenance for r in open_now):
        flags.append(MAINTENANCE)
    if open_now:
        flags.append(RESERVED)
    if node.drain and node.state is NodeState.DOWN:
        flags.append(DRAIN)
    phase = phase_of(node)
    if phase is not None:
        flags.append(phase.value)
    if phase in (Phase.POWERED_DOWN, Phase.POWERING_DOWN):
        return flags  # its agent is off by design
    seen = last_contact(cluster, node)
    if seen is None or now - seen > not_responding_after(cluster.config):
        flags.append(NOT_RESPONDING)
    return flags


def power_display(cluster: Cluster, node: Node, display: str) -> str:
    """A sleeping node's base state: the one it would have up (its drain is the power
    phase's, not an operator's): ``idle`` asleep, ``mix`` or ``alloc`` while the jobs
    of a requested power-down run on."""
    if phase_of(node) is None:
        return display
    return cluster.node_display_state(node.evolve(state=NodeState.UP))
