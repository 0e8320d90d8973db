"""The server's ``PriorityService`` with ``[priority] fairshare_algorithm = "fair_tree"``:
the factor a pending job gets and the rows ``sshare`` is served both come from fair
tree; without the key the classic algorithm stays."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.priority import Account, FairshareAlgorithm, PriorityPolicy, UserAccount
from hal.server.priority import PriorityService
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import make_job, make_node

NOW = 1_000_000.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    c = Cluster(store, HalConfig(cluster_name="test"), VirtualClock(NOW))
    c.nodes = {name: make_node(name).build() for name in ("n1", "n2")}
    yield c
    store.close()


def _service(cluster: Cluster, algorithm: FairshareAlgorithm) -> PriorityService:
    policy = PriorityPolicy(
        enabled=True,
        weight_fairshare=10_000,
        decay_half_life_s=0.0,  # plain billing-seconds
        accounts=(Account("heavy"), Account("light")),
        users=(
            UserAccount("idle", "heavy", default=True),
            UserAccount("hog", "heavy", default=True),
            UserAccount("busy", "light", default=True),
        ),
        fairshare_algorithm=algorithm,
    )
    service = PriorityService(cluster, policy)
    # heavy used 100 (all of it hog's), light 50 (busy): LF(light) = 0.5/(1/3) = 1.5,
    # LF(heavy) = 0.5/(2/3) = 0.75. Walk: busy (3/3), then idle (inf: 2/3), hog (1/3).
    service.ledger.record(("heavy", "hog"), 1.0, NOW - 200, NOW - 100)
    service.ledger.record(("light", "busy"), 1.0, NOW - 150, NOW - 100)
    service.recalculate()
    return service


def test_fair_tree_ranks_an_idle_user_of_a_heavy_account_below_a_busy_light_one(
    cluster: Cluster,
) -> None:
    service = _service(cluster, "fair_tree")
    rows = {(r.account, r.user): r for r in service.shares()}
    assert rows[("light", "busy")].fairshare == 1.0
    assert rows[("heavy", "idle")].fairshare == pytest.approx(2 / 3)
    assert rows[("heavy", "hog")].fairshare == pytest.approx(1 / 3)
    assert rows[("heavy", "")].level_fs == pytest.approx(0.75)
    job = make_job(7).user("idle").account("heavy").submitted(NOW).build()
    assert service.evaluate(job).factors.fairshare == pytest.approx(2 / 3)
    assert service.evaluate(job).weighted.fairshare == pytest.approx(10_000 * 2 / 3)


def test_classic_stays_the_default(cluster: Cluster) -> None:
    assert PriorityPolicy().fairshare_algorithm == "classic"
    service = _service(cluster, "classic")
    rows = {(r.account, r.user): r for r in service.shares()}
    assert all(r.level_fs is None for r in rows.values())
    # classic: idle inherits part of heavy's overuse but has used nothing itself
    assert rows[("heavy", "idle")].fairshare > rows[("heavy", "hog")].fairshare
