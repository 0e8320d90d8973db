"""The agent's ``--features`` and a registration's features: words a job's --constraint
can name, checked before the agent starts (``parse_features``) and again by the server
(``check_features``)."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.core.node import MAX_FEATURES, check_features, parse_features


def test_parse_features_splits_and_strips() -> None:
    assert parse_features("a100, ib,,nvme") == ("a100", "ib", "nvme")
    assert parse_features("") == ()


@pytest.mark.parametrize(
    ("text", "field"),
    [("a100,a b", "features[1]"), ("x" * 129, "features[0]"), ("ib|eth", "features[0]")],
)
def test_a_feature_no_constraint_could_name_is_refused(text: str, field: str) -> None:
    with pytest.raises(InvalidRequest, match="--features a100,ib") as err:
        parse_features(text)
    assert err.value.field == field


def test_too_many_features_are_refused() -> None:
    check_features([f"f{i}" for i in range(MAX_FEATURES)])
    with pytest.raises(InvalidRequest, match=f"at most {MAX_FEATURES} features"):
        check_features([f"f{i}" for i in range(MAX_FEATURES + 1)])
