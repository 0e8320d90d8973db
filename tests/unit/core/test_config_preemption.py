"""``[preemption]`` and the QoS preemption keys of ``hal.toml``."""

from __future__ import annotations

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.preemption import PreemptionPolicy, PreemptMode, PreemptType


def test_defaults_are_off() -> None:
    config = config_from_dict({})
    assert config.preemption == PreemptionPolicy()
    assert not config.preemption.enabled


def test_a_full_table_and_qos_lists() -> None:
    config = config_from_dict(
        {
            "preemption": {
                "type": "qos",
                "mode": "cancel",
                "grace_time": "1:00",
                "exempt_time": 600,
            },
            "qos": [
                {"name": "high", "priority": 10, "preempt": ["low"], "grace_time": 30},
                {"name": "low", "preempt_mode": "requeue"},
            ],
        }
    )
    assert config.preemption == PreemptionPolicy(
        PreemptType.QOS, PreemptMode.CANCEL, grace_time_s=60.0, exempt_time_s=600.0
    )
    high, low = config.priority.qos
    assert high.preempt == ("low",) and high.grace_time_s == 30.0 and high.preempt_mode is None
    assert low.preempt == () and low.preempt_mode == "requeue" and low.grace_time_s is None


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"preemption": {"type": "fifo"}}, "preemption.type", "off, qos, partition_prio"),
        ({"preemption": {"mode": "gang"}}, "preemption.mode", "requeue, cancel, suspend"),
        ({"preemption": {"grace": 3}}, "preemption.grace", "unknown key"),
        ({"preemption": {"grace_time": "soon"}}, "preemption.grace_time", "duration"),
        ({"preemption": 3}, "preemption", "must be a table"),
        (
            {"qos": [{"name": "high", "priority": 5, "preempt": ["nope"]}]},
            "qos[0].preempt",
            "not another configured QoS",
        ),
        (
            {"qos": [{"name": "high", "priority": 5, "preempt": ["high"]}]},
            "qos[0].preempt",
            "not another configured QoS",
        ),
        (
            {"qos": [{"name": "a", "priority": 5, "preempt": ["b"]}, {"name": "b", "priority": 5}]},
            "qos[0].preempt",
            "raise 'a''s priority above 5",
        ),
        ({"qos": [{"name": "a", "preempt": "b"}]}, "qos[0].preempt", "list of QoS names"),
        ({"qos": [{"name": "a", "preempt_mode": "kill"}]}, "qos[0].preempt_mode", "suspend"),
    ],
)
def test_mistakes_name_the_field(raw: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict(raw)
    assert err.value.field == field
    assert words in str(err.value)


def test_suspend_is_accepted_as_default_and_per_qos() -> None:
    """Slurm's PreemptMode=SUSPEND: ``mode`` and a QoS's ``preempt_mode`` may say it."""
    config = config_from_dict(
        {
            "preemption": {"type": "qos", "mode": "suspend"},
            "qos": [
                {"name": "high", "priority": 10, "preempt": ["low"]},
                {"name": "low", "preempt_mode": "suspend"},
            ],
        }
    )
    assert config.preemption.mode is PreemptMode.SUSPEND
    assert config.priority.qos[1].preempt_mode == "suspend"
