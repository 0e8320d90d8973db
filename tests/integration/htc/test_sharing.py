"""Workers move between live sessions as demand changes, by priority, and are accounted
as the user's batch usage (issue 8: Symphony's ownership and sharing model, workers as
HAL jobs in one pool and one fair share).

Own server: 2 agents x 2 CPUs (a pool of 4 one-CPU workers) and a fair-share policy that
recomputes usage every second, with one user, alice, who has not run anything else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hal.config.priority import priority_from_dict
from hal.htc import HtcClient
from hal.testing.live import LiveServer, wait_until

SLEEP = "hal.htc.examples:sleep_ms"
POLICY = priority_from_dict(
    {
        "priority": {"weight_fairshare": 10_000, "calc_period": 1, "decay_half_life": "7-0"},
        "accounts": [{"name": "physics"}],
        "users": [{"name": "alice", "default_account": "physics"}],
    }
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    server = LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"priority": POLICY})
    with server:
        token = server.add_users("alice")["alice"]
        with server.agents(2, cpus=2):
            yield server, token


def ready(hc: HtcClient, session_id: str) -> int:
    return sum(w.state == "ready" for w in hc.session(session_id).workers)


def test_workers_move_to_a_new_session_by_priority_and_back_when_its_demand_ends(
    live: tuple[LiveServer, str],
) -> None:
    """Session A has the whole pool (4 workers) and a long backlog. Session B of the same
    user opens with priority 3 against A's 1: A gives up 3 of its warm workers and B gets
    them (1:3), while A keeps working. When B's tasks are done and it closes, A takes the
    whole pool back. Every worker was a HAL job of alice's, and the CPU time they held is
    alice's usage in the batch fair share."""
    server, token = live
    with HtcClient(server.url, token) as hc, server.client(token) as alice:
        a = hc.open_session(SLEEP, max_workers=4, name="a")
        backlog = a.submit_many([(20,)] * 3000)  # ~15 s on 4 workers: demand outlasts the test
        wait_until(lambda: ready(hc, a.id) == 4, timeout=60, message="A to hold the pool")
        assert alice.shares().rows  # the fair-share tree is live
        with hc.open_session(SLEEP, max_workers=4, priority=3, name="b") as b:
            b_futures = b.submit_many([(20,)] * 600)
            wait_until(
                lambda: ready(hc, b.id) == 3 and ready(hc, a.id) == 1,
                timeout=60,
                message="3 of A's workers to move to B (priority 3 against 1)",
            )
            assert hc.session(a.id).target_workers == 1
            jobs = [j for j in alice.jobs() if j.name == f"htc-{b.id}" and j.state == "RUNNING"]
            assert len(jobs) == 3 and {j.user for j in jobs} == {"alice"}
            assert all(f.result(60) == 20 for f in b_futures)
            done_in_a = sum(f.done() for f in backlog)
            assert 0 < done_in_a < len(backlog)  # A kept making progress on its 1 worker
        wait_until(lambda: ready(hc, a.id) == 4, timeout=60, message="A to take the pool back")
        hc.cancel(a.id)
        a.disconnect()
        wait_until(
            lambda: not [j for j in alice.jobs() if j.name.startswith("htc-")],
            timeout=30,
            message="the worker jobs to end",
        )
        wait_until(
            lambda: any(r.user == "alice" and r.raw_usage > 0 for r in alice.shares().rows),
            timeout=30,
            message="alice's fair-share usage to include her workers' CPU time",
        )
