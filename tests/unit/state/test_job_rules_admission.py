"""``--near``/``--apart`` at submit (``hal.state.job_rules``): a level the cluster lacks, a
job id that names nothing or an ended job, a name that matches none of the user's live
jobs, and another user's job (unless an administrator asks) are each refused, saying what
to write; the rules are kept with the job."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import BadConstraints, InvalidRequest, PermissionDenied
from hal.core.job import JobSpec
from hal.core.job_rules import parse_rules
from hal.core.states import JobState
from hal.state.cluster import Caller, Cluster
from hal.state.codec import spec_from_json, spec_to_json
from hal.testing import make_job
from hal.testing.mirror import store

ALICE = Caller("alice")
ROOT = Caller("root", admin=True)


def _spec(user: str = "alice", *, near: str = "", apart: str = "", name: str = "j") -> JobSpec:
    return JobSpec(
        user=user,
        script="#!/bin/sh\n",
        name=name,
        near=parse_rules([near], "near"),
        apart=parse_rules([apart], "apart"),
    )


def _submit(cluster: Cluster, spec: JobSpec, caller: Caller = ALICE) -> int:
    checked = cluster.admission.for_caller(spec, caller)
    return asyncio.run(cluster.submit([checked]))[0].job_id


def _with_targets(cluster: Cluster) -> None:
    """Alice's pending ``db`` (7), Bob's running ``web`` (8), Alice's ended job (9) and
    her running ``svc`` (10)."""
    store(
        cluster,
        make_job(7).name("db").build(),
        make_job(8).name("web").user("bob").running_on("n1").build(),
        make_job(9).state(JobState.COMPLETED).build(),
        make_job(10).name("svc").running_on("n1").build(),
    )


def test_rules_naming_live_jobs_are_taken_and_kept(cluster: Cluster) -> None:
    _with_targets(cluster)
    spec = _spec(near="job:7@node,preferred=name:db@node,name:svc", apart="job:7@nvlink")
    job = cluster.jobs[_submit(cluster, spec)]
    assert job.spec.near == spec.near and job.spec.apart == spec.apart
    assert spec_from_json(spec_to_json(job.spec), job.spec.script) == job.spec


def test_an_unknown_job_id_is_refused(cluster: Cluster) -> None:
    with pytest.raises(InvalidRequest, match=r"--near=job:404@node: there is no job 404; name"):
        _submit(cluster, _spec(near="job:404"))


def test_an_ended_job_is_refused(cluster: Cluster) -> None:
    _with_targets(cluster)
    with pytest.raises(InvalidRequest, match=r"job 9 has ended \(COMPLETED\)"):
        _submit(cluster, _spec(apart="job:9"))


def test_a_name_matching_none_of_the_users_live_jobs_is_refused(cluster: Cluster) -> None:
    """Bob's ``web`` runs, but a ``name:`` rule names the submitter's own jobs."""
    _with_targets(cluster)
    with pytest.raises(InvalidRequest, match="no pending or running job of yours is named 'web'"):
        _submit(cluster, _spec(near="name:web"))


def test_a_job_may_name_its_own_name(cluster: Cluster) -> None:
    """The elements of an array (or jobs of one name) may keep near each other."""
    _submit(cluster, _spec(near="name:train@node", name="train"))


def test_another_users_job_is_refused_unless_an_administrator_asks(cluster: Cluster) -> None:
    _with_targets(cluster)
    with pytest.raises(PermissionDenied, match="job 8 is bob's; a rule may name only your own"):
        _submit(cluster, _spec(near="job:8"))
    _submit(cluster, _spec("root", near="job:8"), ROOT)


def test_a_level_the_cluster_lacks_is_refused_naming_its_levels(cluster: Cluster) -> None:
    _with_targets(cluster)
    with pytest.raises(BadConstraints) as err:
        _submit(cluster, _spec(near="job:7@leaf"))
    assert err.value.message == (
        "--near=job:7@leaf: this cluster has no 'leaf' level; its levels are node, nvlink; "
        "write e.g. --near=job:7@node"
    )
    assert err.value.field == "near"
