"""``[harmonic] weight``: the harmonic score plugin's weight in the server's default
profile, 0 to leave it out; checked when the file is read, taken again at reconfigure."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hal.api.server import HalServer
from hal.config.harmonic import WEIGHT
from hal.config.model import config_from_dict, load_config
from hal.core.errors import InvalidRequest
from hal.scheduler.plugins import HARMONIC, HARMONIC_WEIGHT
from hal.server.profile import server_profile


def scorers(server: HalServer) -> dict[str, float]:
    return {p.name: w for p, w in server.scheduler.profile.score}


def test_the_default_weight_is_the_plugins_own() -> None:
    assert WEIGHT == HARMONIC_WEIGHT
    profile = server_profile(config_from_dict({}))
    assert profile["score_weights"][HARMONIC] == HARMONIC_WEIGHT  # type: ignore[index]


def test_a_weight_sets_the_plugins_score_weight_and_zero_leaves_it_out() -> None:
    profile = server_profile(config_from_dict({"harmonic": {"weight": 5}}))
    assert profile["score_weights"][HARMONIC] == 5.0  # type: ignore[index]
    off = server_profile(config_from_dict({"harmonic": {"weight": 0}}))
    assert HARMONIC not in off["plugins"]  # type: ignore[operator]
    assert HARMONIC not in off["score_weights"]  # type: ignore[operator]


def test_score_weights_in_the_scheduler_table_win() -> None:
    raw = {"harmonic": {"weight": 5}, "scheduler": {"score_weights": {HARMONIC: 3}}}
    assert server_profile(config_from_dict(raw))["score_weights"][HARMONIC] == 3  # type: ignore[index]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (-1, "must be from 0 (the plugin off) to 1000"),
        ("high", "'high' is not a number"),
        (True, "True is not a number"),
        (float("nan"), "must be from 0"),
        (1e9, "must be from 0"),
    ],
)
def test_a_bad_weight_is_refused_naming_the_key(value: object, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"harmonic": {"weight": value}}, source="hal.toml")
    assert err.value.field == "harmonic.weight"
    assert err.value.message.startswith("hal.toml: harmonic.weight: ")
    assert says in err.value.message


def test_the_server_builds_with_it_and_reconfigure_takes_a_new_one(tmp_path: Path) -> None:
    path = tmp_path / "hal.toml"
    path.write_text("[harmonic]\nweight = 0\n")
    server = HalServer(load_config(path), f"sqlite:///{tmp_path / 'hal.db'}", config_path=path)
    try:
        server.store.migrate()  # (serve would; reconfigure records an event)
        assert HARMONIC not in scorers(server)
        path.write_text("[harmonic]\nweight = 3.5\n")
        asyncio.run(server.reconfigure())
        assert scorers(server)[HARMONIC] == 3.5
        path.write_text("[harmonic]\nweight = -2\n")
        with pytest.raises(InvalidRequest, match=r"harmonic\.weight"):
            asyncio.run(server.reconfigure())
        assert scorers(server)[HARMONIC] == 3.5  # a mistake changes nothing
    finally:
        server.store.close()
