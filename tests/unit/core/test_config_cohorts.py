"""``cohort`` and ``borrow_limit`` of ``[[accounts]]``."""

from __future__ import annotations

import pytest

from hal.config.priority import priority_from_dict
from hal.core.errors import InvalidRequest
from hal.core.priority import TresLimits


def test_a_cohort_of_two() -> None:
    policy = priority_from_dict(
        {
            "accounts": [
                {"name": "a", "grp_tres": {"cpus": 8}, "cohort": "c", "borrow_limit": {"cpus": 4}},
                {"name": "b", "grp_tres": {"cpus": 8}, "cohort": "c"},
            ]
        }
    )
    a, b = policy.accounts
    assert (a.cohort, a.borrow_limit) == ("c", TresLimits(cpus=4))
    assert (b.cohort, b.borrow_limit) == ("c", TresLimits())
    assert policy.has_cohorts


@pytest.mark.parametrize(
    ("accounts", "field", "words"),
    [
        (
            [{"name": "a", "cohort": "c"}, {"name": "b", "cohort": "c"}],
            "accounts[0].cohort",
            "needs grp_tres",
        ),
        (
            [{"name": "a", "grp_tres": {"cpus": 1}, "cohort": "c"}],
            "accounts[0].cohort",
            "has one account",
        ),
        (
            [{"name": "a", "grp_tres": {"cpus": 1}, "cohort": 3}],
            "accounts[0].cohort",
            "cohort name",
        ),
        ([{"name": "a", "borrow_limit": {"cpus": 1}}], "accounts[0].borrow_limit", "in a cohort"),
    ],
)
def test_mistakes_name_the_field(accounts: list[dict[str, object]], field: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        priority_from_dict({"accounts": accounts})
    assert err.value.field == field
    assert words in str(err.value)
