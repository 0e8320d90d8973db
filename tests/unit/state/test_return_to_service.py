"""Slurm's ReturnToService (hal.toml ``return_to_service``): which DOWN nodes a
registering agent brings back, as Slurm 22.05.8 was seen to (docs/slurm-checks.md),
and the setting as hal.toml takes it."""

from __future__ import annotations

import pytest

from hal.config.model import HalConfig, config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.node import Node
from hal.core.resources import ResourceVector
from hal.core.states import NodeState
from hal.state.node_reasons import NOT_RESPONDING
from hal.state.return_to_service import stays_down


def node(state: NodeState, reason: str = "") -> Node:
    return Node(name="n1", resources=ResourceVector(2, 1 << 30, 0), state=state, reason=reason)


SILENT = node(NodeState.DOWN, NOT_RESPONDING)  # the server's own DOWN
OPERATOR = node(NodeState.DOWN, "bad disk")  # scontrol update State=DOWN


@pytest.mark.parametrize(
    ("before", "setting", "stays"),
    [
        (SILENT, 0, True),  # Slurm's default: resumed by hand only
        (OPERATOR, 0, True),
        (SILENT, 1, False),  # back: it was down for not responding
        (OPERATOR, 1, True),
        (SILENT, 2, False),  # back whatever the reason
        (OPERATOR, 2, False),
        (node(NodeState.UP), 0, False),
        (node(NodeState.DRAIN, "maint"), 2, False),  # not DOWN (a drain stays: register)
    ],
)
def test_which_down_nodes_come_back(before: Node, setting: int, stays: bool) -> None:
    assert stays_down(before, setting) is stays


def test_the_setting_defaults_to_hals_one_and_takes_only_slurms_values() -> None:
    assert HalConfig().return_to_service == 1
    assert config_from_dict({"return_to_service": 0}).return_to_service == 0
    assert config_from_dict({"return_to_service": 2}).return_to_service == 2
    for bad in (3, -1, True, 1.0, "1"):
        with pytest.raises(InvalidRequest, match="return_to_service: must be 0"):
            config_from_dict({"return_to_service": bad})
