"""``[priority]``, ``[[accounts]]``, ``[[users]]``, ``[[qos]]`` and PriorityJobFactor in
hal.toml: parsed into the policy, and every mistake named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.priority import Account, Qos, TresLimits, UserAccount

GiB = 1 << 30


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


def test_account_submit_and_per_job_limits_and_qos_mem_per_job() -> None:
    config = config_from_dict(
        {
            "accounts": [
                {
                    "name": "physics",
                    "max_submit_jobs": 40,
                    "grp_submit_jobs": 200,
                    "max_tres_per_job": {"cpus": 128, "gpus": 8, "mem": "512G", "nodes": 4},
                    "max_wall": "2-0",
                },
                {"name": "lattice", "parent": "physics", "max_submit_jobs": 0},
            ],
            "qos": [{"name": "q", "max_tres_per_job": {"mem": "64G"}}],
        }
    )
    physics, lattice = config.priority.accounts
    assert physics == Account(
        "physics",
        max_submit_jobs=40,
        grp_submit_jobs=200,
        max_tres_per_job=TresLimits(cpus=128, gpus=8, mem_bytes=512 * GiB, nodes=4),
        max_wall_s=2 * 86400,
    )
    assert physics.has_limits and physics.has_submit_limits
    # a submit limit alone is checked at submit: the scheduler has nothing to enforce
    assert lattice.max_submit_jobs == 0 and not lattice.has_limits and lattice.has_submit_limits
    assert config.priority.qos[0].max_tres_per_job == TresLimits(mem_bytes=64 * GiB)
    assert config.priority.has_limits


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"accounts": [{"name": "a", "max_submit_jobs": -1}]}, "accounts[0].max_submit_jobs"),
        ({"accounts": [{"name": "a", "grp_submit_jobs": "many"}]}, "accounts[0].grp_submit_jobs"),
        ({"accounts": [{"name": "a", "grp_submit_jobs": True}]}, "accounts[0].grp_submit_jobs"),
        ({"accounts": [{"name": "a", "max_wall": "soon"}]}, "accounts[0].max_wall"),
        ({"accounts": [{"name": "a", "max_wall": -5}]}, "accounts[0].max_wall"),
        (
            {"accounts": [{"name": "a", "max_tres_per_job": {"disk": 1}}]},
            "accounts[0].max_tres_per_job.disk",
        ),
        (
            {"accounts": [{"name": "a", "max_tres_per_job": {"mem": "lots"}}]},
            "accounts[0].max_tres_per_job.mem",
        ),
        (
            {"accounts": [{"name": "a", "max_tres_per_job": {"cpus": -1}}]},
            "accounts[0].max_tres_per_job.cpus",
        ),
        ({"accounts": [{"name": "a", "max_tres_per_job": 4}]}, "accounts[0].max_tres_per_job"),
        ({"accounts": [{"name": "a", "max_submit_job": 4}]}, "accounts[0].max_submit_job"),
        ({"qos": [{"name": "q", "max_tres_per_job": {"mem": "x"}}]}, "qos[0].max_tres_per_job.mem"),
    ],
)
def test_account_limit_mistakes_name_their_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict(raw)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"priority": {"weight_age": -1}}, "priority.weight_age"),
        ({"priority": {"weight_fairshare": 2**62}}, "priority.weight_fairshare"),
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
