"""A conda-pack environment (``--python-env=NAME@ALIAS``) over a real registry on SQLite
(hal.state.rollout, hal.state.artifacts): it is one of the job's pins, so an alias's
canary reaches it by job id as it reaches ``--artifact`` and ``--container``, and a
version a job pins cannot be removed under it."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator

import pytest

from hal.core.artifacts import ARCHIVE, ArtifactRef
from hal.core.clock import VirtualClock
from hal.core.errors import HalError
from hal.core.job import JobSpec
from hal.core.pyenv import ARTIFACT_KEY, make_python_env, pin_conda
from hal.state.artifacts import Registry
from hal.state.cluster import Caller
from hal.state.rollout import canary_pick, pins_of
from hal.testing.mirror import new_cluster

ADMIN = Caller("admin", admin=True)


async def _archive(version: str) -> AsyncIterator[bytes]:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        data = f"conda env {version}\n".encode()
        info = tarfile.TarInfo("bin/conda-unpack")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    yield out.getvalue()


def test_a_conda_environments_alias_gets_its_canary_and_pins_its_version(
    db: str, clock: VirtualClock
) -> None:
    cluster = new_cluster(db, clock)

    async def run() -> None:
        registry = Registry(cluster)
        await registry.load()
        for version in ("1", "2", "3"):
            await registry.publish("condaenv", version, ADMIN, _archive(version), kind=ARCHIVE)
        await registry.aliases.promote("condaenv", "1", "stable", ADMIN)
        await registry.aliases.promote("condaenv", "2", "stable", ADMIN, share=50.0)
        asked = make_python_env({ARTIFACT_KEY: "condaenv@stable"})
        assert asked.artifact is not None
        (pinned,) = registry.pin([asked.artifact])
        spec = JobSpec(user="alice", script="#!/bin/sh\n", python_env=pin_conda(asked, pinned))
        assert [str(r) for r in pins_of(spec)] == ["condaenv@1"]
        await cluster.submit([spec] * 20)
        jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
        for job in jobs:
            env = job.spec.python_env
            assert env is not None and env.artifact is not None
            canary = canary_pick("condaenv", "stable", job.id, 50.0)
            assert env.artifact.version == ("2" if canary else "1")
            assert env.sha256 == registry.index[("condaenv", env.artifact.version)].sha256
            assert env.shown == f"conda:condaenv@{env.artifact.version}"
        # a version a queued job pins stays
        (three,) = registry.pin([ArtifactRef("condaenv", "3", "", ARCHIVE)])
        own = JobSpec(user="alice", script="#!/bin/sh\n", python_env=pin_conda(asked, three))
        await cluster.submit([own])
        with pytest.raises(HalError, match=r"condaenv@3 is pinned by jobs that have not ended"):
            await registry.remove("condaenv", "3", ADMIN)

    asyncio.run(run())


def test_a_conda_environment_is_among_the_pins_a_job_shows() -> None:
    pinned = ArtifactRef("condaenv", "3", "ab" * 32, ARCHIVE)
    env = pin_conda(make_python_env({ARTIFACT_KEY: "condaenv@3"}), pinned)
    tools = ArtifactRef("tools", "1", "cd" * 32, ARCHIVE)
    spec = JobSpec(user="alice", script="", artifacts=(tools,), python_env=env)
    assert pins_of(spec) == (tools, pinned)
