"""Which host CPUs each job of an agent is bound to (``hal.agent.cpus``): the lowest
free ones, the same for a job's batch script and its steps, given back at its end;
unbound rather than refused when too few are free; off unless the agent serves the
host's own CPUs, or ``--bind-cpus yes``."""

from __future__ import annotations

import os

import pytest

from hal.agent.cpus import CpuPool, bind, cpu_pool, fence_choice
from hal.agent.steps import own_cpus
from hal.compat.local_step import bound_cpus
from hal.core.errors import InvalidRequest


def test_jobs_get_the_lowest_free_cpus_and_give_them_back() -> None:
    pool = CpuPool((2, 3, 5, 7))
    assert pool.take((1, 0), 2) == (2, 3)
    assert pool.take((1, 0), 1) == (2, 3)  # its steps: the job's own, whatever they ask
    assert pool.take((2, 0), 1) == (5,)
    assert pool.take((3, 0), 2) == ()  # one left: runs unbound
    assert not pool.holds((3, 0))
    pool.give((1, 0))
    assert pool.take((3, 0), 2) == (2, 3)
    pool.note((4, 1), (7,))  # an adopted job's, from its plan
    assert pool.take((5, 0), 1) == ()
    assert pool.take((6, 0), 0) == ()


def test_binding_is_off_without_cpus() -> None:
    pool = CpuPool()
    assert not pool.enabled
    assert pool.take((1, 0), 1) == ()
    pool.note((1, 0), (0,))
    assert not pool.holds((1, 0))


def test_the_agents_choice() -> None:
    host = sorted(os.sched_getaffinity(0))
    assert cpu_pool("auto", None).cpus == tuple(host)  # the host's own CPUs
    assert not cpu_pool("auto", 2).enabled  # a virtual node (--cpus): never bound
    assert not cpu_pool("no", None).enabled
    assert cpu_pool("yes", 1).cpus == (host[0],)
    with pytest.raises(InvalidRequest, match="lower --cpus or use --bind-cpus no"):
        cpu_pool("yes", len(host) + 1)
    with pytest.raises(InvalidRequest, match="--bind-cpus must be one of"):
        cpu_pool("maybe", None)


def test_only_bound_jobs_are_fenced() -> None:
    """``--constrain-cores``: an agent that binds no job fences none (``auto``), and
    refuses ``yes``, saying how to bind them."""
    bound = CpuPool((0, 1))
    assert fence_choice("auto", bound) == "auto" and fence_choice("yes", bound) == "yes"
    assert fence_choice("auto", CpuPool()) == "no"
    with pytest.raises(InvalidRequest, match="--bind-cpus yes"):
        fence_choice("yes", CpuPool())
    with pytest.raises(InvalidRequest, match="must be one of"):
        fence_choice("maybe", bound)


def test_bind_sets_the_affinity_of_the_calling_process() -> None:
    before = os.sched_getaffinity(0)
    first = min(before)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        bind((first,))
        os._exit(0 if os.sched_getaffinity(0) == {first} else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    bind((10_000,))  # no such CPU: left as it was, not an error
    assert os.sched_getaffinity(0) == before


def test_a_steps_tasks_run_on_its_places_among_the_jobs_cpus() -> None:
    assert own_cpus((4, 5, 6), [1]) == (5,)  # srun --exact: its own of the job's
    assert own_cpus((4, 5, 6), None) == (4, 5, 6)  # --overlap: all the job's
    assert own_cpus((), [1]) == ()  # the job is not bound: neither is the step
    assert own_cpus((4, 5), [7]) == (4, 5)  # a place the job does not have: all


def test_srun_binds_a_local_steps_tasks_only_inside_a_bound_job() -> None:
    own = sorted(os.sched_getaffinity(0))
    bound = {"SLURM_CPUS_ON_NODE": str(len(own))}
    if len(own) > 1:
        assert bound_cpus((1,), bound) == (own[1],)
    assert bound_cpus((), bound) == ()
    assert bound_cpus(tuple(range(len(own))), bound) == ()  # all of them: nothing to do
    # a job the agent did not bind: srun's CPUs are not the job's
    assert bound_cpus((0,), {"SLURM_CPUS_ON_NODE": str(len(own) + 1)}) == ()
