"""``sbatch -C FEATURE`` that no node of the partition has: Slurm 22.05.8 refuses it
with "Invalid feature specification" (its peer); HAL refused it with a
message about CPUs and memory that did not name the feature."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from hal.core.errors import InvalidRequest
from hal.core.job import JobSpec
from hal.state.cluster import Cluster

SPEC = JobSpec(user="alice", script="#!/bin/sh\n", time_limit_s=600)


def test_a_feature_no_node_has_is_named(cluster: Cluster) -> None:
    with pytest.raises(InvalidRequest) as err:
        asyncio.run(cluster.submit([SPEC.with_changes(constraint=("gpu", "ib"))]))
    assert err.value.message == (
        "Invalid feature specification: no node of the partition has gpu, ib "
        "(its nodes' features: none)"
    )
    assert err.value.field == "constraint"
    node = cluster.nodes["n1"]
    cluster.nodes["n1"] = dataclasses.replace(node, features=("ib",))
    with pytest.raises(InvalidRequest, match=r"has gpu \(its nodes' features: ib\)$"):
        asyncio.run(cluster.submit([SPEC.with_changes(constraint=("gpu", "ib"))]))
    (ok,) = asyncio.run(cluster.submit([SPEC.with_changes(constraint=("ib",))]))
    assert cluster.jobs[ok.job_id].spec.constraint == ("ib",)
