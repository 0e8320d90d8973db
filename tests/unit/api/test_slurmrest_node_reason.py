"""The slurmrestd facade's node carries who set its reason and when (v0.0.45's
``reason_set_by_user`` and ``reason_changed_at``), as sinfo -R shows them."""

from __future__ import annotations

from hal.api.slurmrest.views import node
from hal.wire.nodes import NodeInfo


def info(**changes: object) -> NodeInfo:
    base: dict[str, object] = {
        "name": "n1",
        "state": "DRAIN",
        "display_state": "drain",
        "cpus": 2,
        "cpus_alloc": 0,
        "memory_bytes": 1 << 30,
        "memory_alloc_bytes": 0,
        "gpus": 0,
        "gpus_alloc": 0,
    }
    return NodeInfo.model_validate(base | changes)


def test_reason_names_who_and_when() -> None:
    shown = node(info(reason="maint", reason_user="alice", reason_time=1795673401.5), "hal")
    assert shown["reason"] == "maint"
    assert shown["reason_set_by_user"] == "alice"
    assert shown["reason_changed_at"] == {"set": True, "infinite": False, "number": 1795673401}


def test_no_reason_time_is_unset() -> None:
    shown = node(info(reason="fan"), "hal")
    assert shown["reason_set_by_user"] == ""
    assert shown["reason_changed_at"] == {"set": False, "infinite": False, "number": 0}
