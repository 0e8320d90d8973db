"""``hal.client.records.read``: an answer read as records carries what the wire model
validated from it carries, mappings kept dicts (``MAPS``, checked against the models)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from hal.client import HalClient
from hal.client.records import DEFAULTS, MAPS, Record, read
from hal.wire.nodes import ClusterConfig, NodeInfo, NodeList, PartitionInfo
from hal.wire.priority import ShareInfo, ShareList
from hal.wire.steps import StepInfo, StepList

# every schema HalClient reads with ``validate=False``
READ = (
    "jobs.JobInfo",
    "steps.StepList",
    "nodes.NodeList",
    "nodes.PartitionList",
    "nodes.ClusterConfig",
    "reservations.ReservationList",
    "priority.PriorityList",
    "priority.ShareList",
)


def _model(schema: str) -> type[BaseModel]:
    module, name = f"hal.wire.{schema}".rsplit(".", 1)
    __import__(module)
    found: type[BaseModel] = getattr(sys.modules[module], name)
    return found


def _plain(value: Any) -> Any:
    """A record as the JSON it was read from: dicts and lists."""
    if isinstance(value, Record):
        value = vars(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


@pytest.mark.parametrize("schema", READ)
def test_the_mappings_kept_dicts_are_the_models(schema: str) -> None:
    """A field typed ``dict[str, ...]`` anywhere in the answer is named in ``MAPS``, and
    only those: a record of one would read its keys as attributes."""
    spec = _model(schema).model_json_schema()
    mappings = set()
    for part in [spec, *spec.get("$defs", {}).values()]:
        for name, prop in part.get("properties", {}).items():
            if prop.get("type") == "object" and "additionalProperties" in prop:
                mappings.add(name)
    assert mappings == set(MAPS.get(schema, ()))


def _node(name: str, **more: Any) -> NodeInfo:
    fields = dict(name=name, state="UP", display_state="idle", cpus=4, cpus_alloc=0)
    fields.update(memory_bytes=1 << 30, memory_alloc_bytes=0, gpus=0, gpus_alloc=0)
    return NodeInfo(**fields, **more)


CONFIG = ClusterConfig(
    cluster_name="hal",
    min_job_age_seconds=300,
    kill_wait_seconds=30,
    version="1",
    scheduler_interval_seconds=1.0,
    settings={"MaxArraySize": "10"},
    licenses={"matlab": 2},
)
SHARE = ShareInfo(
    **dict(account="a", user="u", parent="a", depth=1, raw_shares=1, norm_shares=1.0),
    **dict(raw_usage=2.0, norm_usage=1.0, effective_usage=1.0, fairshare=1.0),
    tres_run_minutes={"cpu": 120, "gres/gpu": 0},
)
STEP = StepInfo(
    **dict(job_id=7, step_id=0, name="s", nodes=["a"], tasks=[2], state="RUNNING"),
    **dict(exit_code=0, cpus={"a": [0, 1]}),
)


@pytest.mark.parametrize(
    ("schema", "answer", "mapping"),
    [
        (
            "nodes.NodeList",
            NodeList(nodes=[_node("a", topology_labels={"rack": "r1"}), _node("b")]),
            lambda view: view.nodes[0].topology_labels,
        ),
        ("nodes.ClusterConfig", CONFIG, lambda view: view.licenses),
        (
            "priority.ShareList",
            ShareList(decay_half_life_seconds=60.0, rows=[SHARE]),
            lambda view: view.rows[0].tres_run_minutes,
        ),
        ("steps.StepList", StepList(steps=[STEP]), lambda view: view.steps[0].cpus),
    ],
)
def test_records_carry_what_the_model_reads(
    schema: str, answer: BaseModel, mapping: Callable[[Any], object]
) -> None:
    body = answer.model_dump_json()
    viewed = read(body, schema, validate=False)
    validated = read(body, schema)
    assert type(validated) is type(answer)
    assert validated == answer
    assert _plain(viewed) == answer.model_dump(mode="json")
    assert type(mapping(viewed)) is dict  # (not a record: its keys are data)
    assert mapping(viewed) == mapping(answer)


def test_an_older_servers_partitions_read_their_state_from_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server from before ``PartitionInfo.state`` sends ``up`` alone: a record reads
    the state ``PartitionInfo`` reads from it (DOWN where not up)."""
    shape = '"default":false,"max_time_seconds":0,"default_time_seconds":0,"max_nodes":0'
    body = (
        f'{{"partitions":[{{"name":"a","up":false,{shape},"nodes":[]}},'
        f'{{"name":"b","up":true,{shape},"nodes":["n1"]}},'
        f'{{"name":"c","up":true,"state":"DRAIN",{shape},"nodes":[]}}]}}'
    ).encode()
    client = HalClient("http://127.0.0.1:9", "t")
    monkeypatch.setattr(client, "_request", lambda *_a, **_k: SimpleNamespace(body=body))
    viewed = client.partitions(validate=False)
    validated = client.partitions()
    assert [p.state for p in viewed] == [p.state for p in validated] == ["DOWN", "UP", "DRAIN"]
    assert all(isinstance(p, Record) for p in viewed)


OLDER = {  # an item of each list as a server sends it that knows only the required fields
    "nodes.NodeList": _node("n1"),
    "nodes.PartitionList": PartitionInfo(
        name="a", default=True, up=False, max_time_seconds=0, default_time_seconds=0,
        max_nodes=0, nodes=["n1"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("schema", sorted(OLDER))
def test_fields_an_older_server_leaves_out_read_as_the_models_defaults(schema: str) -> None:
    """``DEFAULTS`` holds every field of the list's items that has a default (but a
    partition's ``state``, worked out from ``up``), at the model's default: a record of
    an answer without them reads each as the model validated from it does."""
    item = OLDER[schema]
    defaults = {
        name: field.get_default(call_default_factory=True)
        for name, field in type(item).model_fields.items()
        if not field.is_required() and name != "state"
    }
    kept = {k: list(v) if isinstance(v, tuple) else v for k, v in DEFAULTS[schema].items()}
    assert kept == defaults
    key = "nodes" if schema == "nodes.NodeList" else "partitions"
    body = json.dumps({key: [item.model_dump(mode="json", exclude=set(defaults))]})
    validated = getattr(read(body, schema), key)[0]
    recorded = getattr(read(body, schema, validate=False), key)[0]
    assert {n: _plain(getattr(recorded, n)) for n in defaults} == {
        n: _plain(getattr(validated, n)) for n in defaults
    }
