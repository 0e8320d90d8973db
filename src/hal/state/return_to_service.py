"""Whether a DOWN node goes back to service when its agent registers: Slurm's
``ReturnToService`` (hal.toml's ``return_to_service``), as Slurm 22.05.8 was seen to do
(docs/slurm-checks.md):

- 0: no DOWN node comes back by itself; an administrator resumes it (Slurm's default);
- 1: a node the server set DOWN because its agent went silent ("Not responding") comes
  back; one an operator set DOWN stays down (HAL's default: what it always did);
- 2: every DOWN node comes back, an operator's DOWN too.

A DRAINED node stays drained whatever the setting, as in Slurm. Read once, where the
agent registers (``hal.state.agents.register``)."""

from __future__ import annotations

from hal.core.node import Node
from hal.core.states import NodeState
from hal.state.node_reasons import NOT_RESPONDING


def stays_down(node: Node, return_to_service: int) -> bool:
    """``node`` (as it was before its agent registered) keeps its DOWN state and reason."""
    if node.state is not NodeState.DOWN or return_to_service == 2:
        return False
    return return_to_service == 0 or node.reason != NOT_RESPONDING
