"""Aliases over a real registry and mirror on SQLite (hal.state.rollout): submissions
naming ``NAME@stable`` are pinned to the alias's version, those whose id falls in a
canary's share to the canary's (a ``--container`` image's too), and their ended jobs are
counted per version until the canary fails markedly more often and is rolled back."""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import AsyncIterator
from dataclasses import replace

from hal.core.artifacts import IMAGE, PROGRAM, ArtifactRef
from hal.core.clock import VirtualClock
from hal.core.container import Container
from hal.core.job import JobSpec
from hal.core.states import JobState
from hal.state.artifacts import Registry
from hal.state.cluster import Caller, Cluster
from hal.state.rollout import canary_pick
from hal.testing.mirror import new_cluster

ADMIN = Caller("admin", admin=True)
FAILED, DONE = JobState.FAILED, JobState.COMPLETED


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _tar(data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        info = tarfile.TarInfo("oci-layout")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def _registry(cluster: Cluster) -> Registry:
    registry = Registry(cluster)
    await registry.load()
    for name, kind in (("app", PROGRAM), ("img", IMAGE)):
        for version in ("1", "2"):
            body = f"{name} {version}".encode()
            if kind == IMAGE:  # (an image is a tar: the registry checks that much)
                body = _tar(body)
            await registry.publish(name, version, ADMIN, _chunks(body), kind=kind)
        await registry.aliases.promote(name, "1", "stable", ADMIN)
        await registry.aliases.promote(name, "2", "stable", ADMIN, share=50.0)
    return registry


def _spec(registry: Registry) -> JobSpec:
    """As a submission pins ``--artifact=app@stable --container=img@stable``."""
    (image,) = registry.pin([ArtifactRef("img", "stable", "")])
    return JobSpec(
        user="alice",
        script="#!/bin/sh\n",
        artifacts=registry.pin([ArtifactRef("app", "stable", "")]),
        container=Container(image=image),
    )


def test_a_canary_takes_its_share_by_job_id_and_a_failing_one_is_rolled_back(
    db: str, clock: VirtualClock
) -> None:
    cluster = new_cluster(db, clock)

    async def run() -> None:
        registry = await _registry(cluster)
        spec = _spec(registry)
        assert [(a.version, a.alias) for a in spec.artifacts] == [("1", "stable")]
        await cluster.submit([spec] * 30)
        jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
        for job in jobs:
            canary = canary_pick("app", "stable", job.id, 50.0)
            (pin,) = job.spec.artifacts
            assert pin.version == ("2" if canary else "1") and pin.alias == "stable"
            image = job.spec.container.image  # type: ignore[union-attr]
            assert image is not None and image.kind == IMAGE
            assert image.version == ("2" if canary_pick("img", "stable", job.id, 50.0) else "1")
        # the app's canary fails every job, its version none
        now = clock.now()
        ended = [
            replace(
                job,
                state=FAILED if job.spec.artifacts[0].version == "2" else DONE,
                start_time=now,
                end_time=now,
            )
            for job in jobs
        ]
        async with cluster.change() as change:
            await change.commit(ended, [])
        for _ in range(100):  # the rollback is a task of the event loop
            if not registry.aliases.by_key[("app", "stable")].canary:
                break
            await asyncio.sleep(0.01)
        app = registry.aliases.by_key[("app", "stable")]
        assert (app.version, app.canary) == ("1", "")
        assert app.rolled_back["automatic"] is True and app.rolled_back["from"] == "2"
        assert registry.aliases.rollbacks["automatic"] == 1
        # the image's canary counted the same jobs, by the image's version each ran
        img = registry.aliases.by_key[("img", "stable")]
        on_2 = sum(canary_pick("img", "stable", j.id, 50.0) for j in jobs)
        assert img.canary == "2"  # (its failures follow the app's version, not its own)
        assert img.counts["2"][0] == on_2 and img.counts["1"][0] == 30 - on_2

    asyncio.run(run())
