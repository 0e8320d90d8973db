"""``[priority] fairshare_algorithm``: classic (the default, Slurm's
PriorityFlags=NO_FAIR_TREE) or fair_tree (Slurm's default); a wrong value stops the
server naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest


def test_classic_is_the_default() -> None:
    assert config_from_dict({"priority": {}}).priority.fairshare_algorithm == "classic"
    assert config_from_dict({}).priority.fairshare_algorithm == "classic"


@pytest.mark.parametrize("value", ["classic", "fair_tree"])
def test_either_algorithm_is_read(value: str) -> None:
    raw = {"priority": {"weight_fairshare": 10000, "fairshare_algorithm": value}}
    assert config_from_dict(raw).priority.fairshare_algorithm == value


@pytest.mark.parametrize("value", ["fairtree", "FAIR_TREE", "", 1, True, ["fair_tree"]])
def test_a_wrong_algorithm_names_the_field(value: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"priority": {"fairshare_algorithm": value}})
    assert err.value.field == "priority.fairshare_algorithm"
    assert "fair_tree" in str(err.value)
