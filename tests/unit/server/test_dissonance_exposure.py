"""Every running job's exposure (what classes share its nodes, and how much of them) is
kept current as jobs of a class and jobs of none start and end around it; a job of no
class changes no neighbour's exposure, so its start and end work out only its own."""

from __future__ import annotations

import random

from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.profiles import CLASSES, PROFILE_CLASS
from hal.core.states import JobState
from hal.server.dissonance import DissonanceService
from hal.state.memory_store import MemoryStateStore
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import new_cluster

NODES = ("n1", "n2", "n3")


def _exposure(svc: DissonanceService, job_id: int) -> dict[str, float]:
    """Worked out from scratch: per node, the classed others' shares by class."""
    run = svc._runs[job_id]
    exposure: dict[str, float] = {}
    for name in run.shares:
        per_class: dict[str, float] = {}
        for other, o in svc._runs.items():
            if other != job_id and o.cls is not None and name in o.shares:
                per_class[o.cls] = per_class.get(o.cls, 0.0) + o.shares[name]
        for cls, share in per_class.items():
            exposure[cls] = max(exposure.get(cls, 0.0), min(share, 1.0))
    return exposure


def test_exposures_stay_current_with_jobs_of_no_class_among_them() -> None:
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    for name in NODES:
        cluster.nodes[name] = make_node(name).cpus(8).build()
    svc = DissonanceService(cluster)
    rng = random.Random(7)
    classes = [None, None, *sorted(CLASSES)[:2]]
    running: dict[int, Job] = {}
    for job_id in range(1, 300):
        clock.advance(1.0)
        if running and rng.random() < 0.45:
            ended = running.pop(rng.choice(sorted(running)))
            svc._jobs_changed([ended.evolve(state=JobState.COMPLETED, end_time=clock.now())])
        else:
            built = make_job(job_id).cpus(rng.choice((1, 2, 4)))
            cls = rng.choice(classes)
            if cls is not None:
                built = built.extra(PROFILE_CLASS, cls)
            job = built.running_on(rng.choice(NODES), start=clock.now()).build()
            running[job_id] = job
            svc._jobs_changed([job])
        for jid in running:
            run = svc._runs[jid]
            assert run.exposure == _exposure(svc, jid)
            assert run.timeline and run.timeline[-1][1] == run.exposure
