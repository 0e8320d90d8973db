"""Bad input in ``hal.toml``: refused at start-up with a message naming the key and what
to write, never a traceback nor a value the server reads differently than written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from hal.cli.main import main
from hal.config.model import config_from_dict, load_config
from hal.core.errors import InvalidRequest

NAN, INF = math.nan, math.inf


def one(**keys: Any) -> dict[str, Any]:
    """A config of one partition ``a`` with ``keys``."""
    return {"partitions": [{"name": "a", **keys}]}


REFUSED = [
    # top-level settings: zero timeouts would call every node DOWN or spin the loops
    ({"cluster_name": ""}, "cluster_name", "name"),
    ({"min_job_age_seconds": 1.5}, "min_job_age_seconds", "whole number"),
    ({"kill_wait_seconds": -1}, "kill_wait_seconds", ">= 0"),
    ({"node_timeout_seconds": 0}, "node_timeout_seconds", "> 0"),
    ({"node_timeout_seconds": INF}, "node_timeout_seconds", "finite"),
    ({"heartbeat_interval_seconds": NAN}, "heartbeat_interval_seconds", "> 0"),
    ({"max_batch_jobs": 0}, "max_batch_jobs", ">= 1"),
    ({"max_request_bytes": 0}, "max_request_bytes", ">= 1"),
    ({"max_array_size": 2**63 - 1}, "max_array_size", "at most"),
    # [scheduler]
    ({"scheduler": {"interval_seconds": "fast"}}, "scheduler.interval_seconds", "seconds"),
    ({"scheduler": {"interval_seconds": -1}}, "scheduler.interval_seconds", "> 0"),
    ({"scheduler": {"interval_seconds": True}}, "scheduler.interval_seconds", "> 0"),
    # [[partitions]]
    ({"partitions": ["a"]}, "partitions[0]", "table"),
    (one(name=""), "partitions[0].name", "name"),
    (one(name="a,b"), "partitions[0].name", "commas"),
    (one(maxtime="1:00:00"), "partitions[0].maxtime", "unknown key"),
    (one(default="false"), "partitions[0].default", "true or false"),
    (one(up=0), "partitions[0].up", "true or false"),
    (one(nodes=5), "partitions[0].nodes", "host list"),
    (one(nodes=[1, 2]), "partitions[0].nodes", "host list"),
    (one(nodes="n[1-"), "partitions[0].nodes", "'n[1-' is not a host list"),
    (one(nodes=["n1", ""]), "partitions[0].nodes", "no valid node"),
    (one(max_time="forever"), "partitions[0].max_time", "not a time limit"),
    (one(max_time=1.5), "partitions[0].max_time", "not a time limit"),
    (one(max_time=True), "partitions[0].max_time", "not a time limit"),
    (one(max_time=99_999_999_999_999), "partitions[0].max_time", "too long"),
    (one(default_time="2:00:00", max_time="1:00:00"), "partitions[0].default_time", "max_time"),
    (one(max_nodes=-1), "partitions[0].max_nodes", ">= 0"),
    (one(max_nodes=2.7), "partitions[0].max_nodes", "whole number"),
    (one(max_nodes="four"), "partitions[0].max_nodes", "whole number"),
    (one(priority_tier="high"), "partitions[0].priority_tier", "whole number"),
    (one(priority_job_factor=-1), "partitions[0].priority_job_factor", ">= 0"),
    # NaN and infinity in durations and numbers of the other tables
    ({"priority": {"max_age": NAN}}, "priority.max_age", "finite"),
    ({"priority": {"calc_period": NAN}}, "priority.calc_period", "non-negative"),
    ({"qos": [{"name": "q", "max_wall": INF}]}, "qos[0].max_wall", "finite"),
    ({"preemption": {"grace_time": NAN}}, "preemption.grace_time", "finite"),
    ({"data": {"cache_url": "http://c:1", "refresh_seconds": NAN}}, "data.refresh_seconds", ">"),
    ({"data": {"cache_url": "http://c:1", "weight": INF}}, "data.weight", ">="),
    ({"topology": {"file": 5}}, "topology.file", "path"),
]


@pytest.mark.parametrize(("raw", "field", "says"), REFUSED, ids=[r[1] for r in REFUSED])
def test_bad_values_are_refused_naming_the_key(raw: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict(raw)
    assert err.value.field == field
    assert field.rsplit(".", 1)[-1] in err.value.message  # [data] says "[data] weight"
    assert says in err.value.message


def test_a_partition_defined_twice_names_both_entries() -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"partitions": [{"name": "a"}, {"name": "b"}, {"name": "a"}]})
    assert err.value.field == "partitions[2].name"
    assert "also partitions[0]" in err.value.message


def test_a_default_set_twice_names_both_partitions() -> None:
    parts = [{"name": "a", "default": True}, {"name": "b"}, {"name": "c", "default": True}]
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"partitions": parts})
    assert err.value.field == "partitions[2].default"
    assert "'a' and 'c'" in err.value.message


def test_partition_nodes_are_host_lists_as_in_slurm() -> None:
    """Before, ``nodes = "n[1-3]"`` became the characters n, [, 1, ... and a list kept
    ``"n[1-3]"`` as one name no node has: the partition matched no node."""
    (part,) = config_from_dict(one(nodes="n[1-3],gpu1")).partitions
    assert part.nodes == ("n1", "n2", "n3", "gpu1")
    (part,) = config_from_dict(one(nodes=["n[1-2]", "n2", "x"])).partitions
    assert part.nodes == ("n1", "n2", "x")
    assert part.to_partition().contains("n1") and not part.to_partition().contains("n3")


def test_valid_partitions_read_as_before() -> None:
    parts = config_from_dict(
        {
            "partitions": [
                {"name": "debug", "max_time": 60, "nodes": []},
                {"name": "batch", "default": True, "max_time": "1-00:00:00", "up": False},
                {"name": "long", "max_time": "UNLIMITED", "default_time": "2:00:00"},
            ]
        }
    ).partitions
    assert [(p.name, p.default, p.max_time_s, p.default_time_s, p.up) for p in parts] == [
        ("debug", False, 3600, 0, True),  # an integer max_time is minutes, as MaxTime
        ("batch", True, 86400, 0, False),
        ("long", False, 0, 7200, True),
    ]
    assert config_from_dict(one()).partitions[0].default  # the only one is the default


def test_a_toml_syntax_error_gives_the_line(tmp_path: Path) -> None:
    path = tmp_path / "hal.toml"
    path.write_text('cluster_name = "x"\n[[partitions]]\nname = "a"\nmax_time = 1-00:00\n')
    with pytest.raises(InvalidRequest, match="line 4"):
        load_config(path)


def test_a_file_that_is_not_utf8_is_refused_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "hal.toml"
    path.write_bytes(b'cluster_name = "caf\xe9"\n')  # Latin-1
    with pytest.raises(InvalidRequest, match="not UTF-8"):
        load_config(path)


@pytest.mark.parametrize(
    "text",
    ['[scheduler]\ninterval_seconds = "fast"\n', '[[partitions]]\nname = "a"\nnodes = 5\n'],
)
def test_hal_server_prints_the_error_and_exits_2(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """These two were a ValueError and a TypeError traceback from ``hal server``."""
    path = tmp_path / "hal.toml"
    path.write_text(text)
    code = main(["server", "--config", str(path), "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"hal: error: {path}: ") and "Traceback" not in err


def test_a_misspelt_scheduler_key_names_every_key_the_table_takes() -> None:
    with pytest.raises(InvalidRequest) as err:
        config_from_dict({"scheduler": {"predicter": "avg2"}})
    assert err.value.field == "scheduler.predicter"
    for key in ("predictor", "interval_seconds", "drain_anomalous_nodes", "plugins"):
        assert key in err.value.message


def test_the_profile_keys_the_config_knows_are_the_frameworks() -> None:
    from hal.config.model import PROFILE_KEYS
    from hal.scheduler.framework.profile import _PROFILE_KEYS

    assert PROFILE_KEYS == _PROFILE_KEYS


@pytest.mark.parametrize(
    ("raw", "field", "hint"),
    [
        ({"clustr_name": "x"}, "clustr_name", "cluster_name"),
        (one(max_tme=60), "partitions[0].max_tme", "max_time"),
        ({"scheduler": {"interval_second": 1}}, "scheduler.interval_second", "interval_seconds"),
        ({"priority": {"weight_fairshar": 1}}, "priority.weight_fairshar", "weight_fairshare"),
        ({"qos": [{"name": "q", "grp_tres": {"cpu": 4}}]}, "qos[0].grp_tres.cpu", "cpus"),
        ({"accounts": [{"name": "a", "fairshar": 2}]}, "accounts[0].fairshar", "fairshare"),
        ({"preemption": {"grace_tme": 3}}, "preemption.grace_tme", "grace_time"),
        ({"data": {"cache_url": "http://c:1", "prestge": True}}, "data.prestge", "prestage"),
        (
            {"topology": {"switches": [{"name": "s", "nodes": "n1", "link_sped": 1}]}},
            "topology.switches[0]",
            "link_speed",
        ),
    ],
)
def test_a_typo_in_a_key_names_the_key_it_is_close_to(
    raw: dict[str, Any], field: str, hint: str
) -> None:
    """A typo was refused with the whole list of keys (seventeen at the top level) to
    search by eye; the message now says which one was meant."""
    with pytest.raises(InvalidRequest) as caught:
        config_from_dict(raw, source="hal.toml")
    assert caught.value.field == field
    assert f"(did you mean {hint!r}?)" in caught.value.message


def test_a_key_close_to_none_gets_no_guess() -> None:
    with pytest.raises(InvalidRequest) as caught:
        config_from_dict({"colour": "blue"}, source="hal.toml")
    assert "did you mean" not in caught.value.message


def test_enable_user_top_is_a_scheduler_switch() -> None:
    assert not config_from_dict({}).enable_user_top  # Slurm's default: administrators only
    assert config_from_dict({"scheduler": {"enable_user_top": True}}).enable_user_top
    with pytest.raises(InvalidRequest, match="enable_user_top must be true or false") as err:
        config_from_dict({"scheduler": {"enable_user_top": "yes"}})
    assert err.value.field == "scheduler.enable_user_top"
