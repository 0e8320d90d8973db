"""``[priority]``, ``[[accounts]]``, ``[[users]]``, ``[[qos]]`` and PriorityJobFactor in
hal.toml: parsed into the policy, and every mistake named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.priority import Account, Qos, UserAccount


def test_a_full_priority_section() -> None:
    config = config_from_dict(
        {
            "priority": {
                "weight_age": 1000,
                "weight_fairshare": 10000,
                "max_age": "2-0",
                "decay_half_life": "1:00:00",
                "favor_small": True,
                "usage_gpu_weight": 8,
            },
            "accounts": [
                {"name": "physics", "fairshare": 3},
                {"name": "lattice", "parent": "physics"},
            ],
            "users": [{"name": "alice", "default_account": "lattice", "accounts": ["physics"]}],
            "qos": [{"name": "high", "priority": 100}],
            "partitions": [{"name": "batch", "priority_job_factor": 10}],
        }
    )
    p = config.priority
    assert p.enabled and p.weight_age == 1000 and p.weight_fairshare == 10000
    assert (p.max_age_s, p.decay_half_life_s, p.favor_small, p.usage_gpu_weight) == (
        2 * 86400,
        3600,
        True,
        8.0,
    )
    assert p.accounts == (Account("physics", "root", 3), Account("lattice", "physics", 1))
    assert p.users == (
        UserAccount("alice", "lattice", 1, default=True),
        UserAccount("alice", "physics", 1, default=False),
    )
    assert p.qos == (Qos("high", 100),)
    assert config.partition_objects()[0].priority_job_factor == 10


def test_without_a_priority_table_priority_is_basic() -> None:
    assert not config_from_dict({}).priority.enabled


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"priority": {"weight_age": -1}}, "priority.weight_age"),
        ({"priority": {"weight_speed": 1}}, "priority.weight_speed"),
        ({"priority": {"max_age": "soon"}}, "priority.max_age"),
        ({"priority": {"max_age": 0}}, "priority.max_age"),
        ({"priority": {"favor_small": "yes"}}, "priority.favor_small"),
        ({"accounts": [{"name": "a", "parent": "b"}]}, "accounts[0].parent"),
        (
            {"accounts": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]},
            "accounts[0].parent",
        ),
        ({"accounts": [{"name": "a", "fairshare": -2}]}, "accounts[0].fairshare"),
        ({"users": [{"name": "u", "default_account": "nope"}]}, "users[0].default_account"),
        ({"qos": [{"name": "q", "priority": "high"}]}, "qos[0].priority"),
    ],
)
def test_mistakes_name_their_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict(raw)
    assert err.value.field == field
