"""Multifactor priority and classic fair share: the numbers Slurm's formulas give."""

from __future__ import annotations

import math

import pytest

from hal.core.node import Partition
from hal.core.priority import Account, PriorityPolicy, Qos, UserAccount
from hal.core.states import PendingReason
from hal.scheduler.plugins.multifactor import (
    MultifactorPriority,
    ShareTree,
    UsageLedger,
    billing_rate,
)
from hal.testing.builders import make_job

DAY = 86_400.0


# -- usage decay -------------------------------------------------------------------------


def test_a_run_one_half_life_ago_counts_half() -> None:
    """A 1-second run that ended one half-life ago is worth (almost exactly) half of it."""
    ledger = UsageLedger(half_life_s=100.0)
    ledger.record(("a", "u"), rate=4.0, start=0.0, end=1.0)
    assert ledger.totals(101.0)[("a", "u")] == pytest.approx(2.0, rel=1e-2)


def test_incremental_and_recomputed_usage_agree() -> None:
    """Charging runs as they end and reading later equals charging them all at the end
    (what a restart does from accounting)."""
    runs = [(0.0, 50.0, 2.0), (20.0, 300.0, 1.0), (400.0, 410.0, 8.0)]
    live = UsageLedger(half_life_s=120.0)
    for start, end, rate in runs:
        live.record(("a", "u"), rate, start, end)
        live.totals(end + 5.0)  # time moves on between runs
    rebuilt = UsageLedger(half_life_s=120.0)
    for start, end, rate in sorted(runs, key=lambda r: -r[1]):  # latest first, as loaded
        rebuilt.record(("a", "u"), rate, start, end)
    assert live.totals(1000.0)[("a", "u")] == pytest.approx(rebuilt.totals(1000.0)[("a", "u")])


def test_running_jobs_are_charged_up_to_now_and_zero_half_life_never_decays() -> None:
    ledger = UsageLedger(half_life_s=0.0)
    ledger.record(("a", "u"), 2.0, 0.0, 10.0)
    totals = ledger.totals(1e9, [(("a", "v"), 3.0, 1e9 - 5.0)])
    assert totals == {("a", "u"): 20.0, ("a", "v"): 15.0}


def test_billing_counts_gpus_by_their_weight() -> None:
    job = make_job(1).cpus(4).gpus(2).running_on("n1").build()
    assert billing_rate(job, gpu_weight=10.0) == 24.0
    assert billing_rate(make_job(2).build(), gpu_weight=10.0) == 0.0


# -- fair share --------------------------------------------------------------------------


def _tree() -> ShareTree:
    return ShareTree(
        [Account("physics", shares=3), Account("chem", shares=1), Account("lattice", "physics")],
        [
            UserAccount("alice", "lattice", default=True),
            UserAccount("bob", "chem", default=True),
            UserAccount("carol", "physics"),
        ],
    )


def test_norm_shares_split_the_parent_by_raw_shares() -> None:
    rows = {(r.account, r.user): r for r in _tree().standing({}).rows}
    assert rows[("physics", "")].norm_shares == pytest.approx(0.75)
    assert rows[("chem", "")].norm_shares == pytest.approx(0.25)
    # physics' children: carol (1) and lattice (1)
    assert rows[("physics", "carol")].norm_shares == pytest.approx(0.375)
    assert rows[("lattice", "alice")].norm_shares == pytest.approx(0.375)
    # no usage at all: everyone's factor is 1
    assert all(r.fairshare == 1.0 for r in rows.values())


def test_classic_factor_is_two_to_the_minus_effective_usage_over_shares() -> None:
    """bob (chem, 1/4 of the cluster) used everything: his account's effective usage is
    1, so chem's factor is 2^-4; bob inherits it (he is chem's only member)."""
    standing = _tree().standing({("chem", "bob"): 100.0})
    chem = standing.row("chem")
    bob = standing.row("chem", "bob")
    assert chem is not None and bob is not None
    assert chem.effective_usage == pytest.approx(1.0)
    assert chem.fairshare == pytest.approx(2**-4)
    # bob: U = 1, UE = 1 + (1 - 1) * 1 = 1, S = 0.25
    assert bob.fairshare == pytest.approx(2**-4)
    assert standing.factor("lattice", "alice") == pytest.approx(1.0)


def test_a_user_inherits_part_of_the_accounts_overuse() -> None:
    """carol has used nothing, but her sibling account lattice used it all: carol's
    effective usage is half of physics' (her share of the level)."""
    standing = _tree().standing({("lattice", "alice"): 10.0})
    carol = standing.row("physics", "carol")
    assert carol is not None
    assert carol.effective_usage == pytest.approx(0.5)  # 0 + (1 - 0) * 1/2
    assert carol.fairshare == pytest.approx(2 ** (-0.5 / 0.375))
    alice = standing.row("lattice", "alice")
    assert alice is not None and alice.fairshare < carol.fairshare


def test_jobs_are_charged_to_a_known_account_or_the_users_default() -> None:
    tree = _tree()
    assert tree.account_for("alice", None) == "lattice"
    assert tree.account_for("alice", "chem") == "chem"
    assert tree.account_for("alice", "nope") == "lattice"
    assert tree.account_for("stranger", None) == "root"
    standing = tree.standing({("root", "stranger"): 1.0})
    assert standing.row("root", "stranger") is not None


@pytest.mark.parametrize(
    ("accounts", "message"),
    [
        ([Account("a", "b")], "unknown parent"),
        ([Account("a", "b"), Account("b", "a")], "own ancestor"),
        ([Account("a"), Account("a")], "twice"),
    ],
)
def test_a_broken_tree_is_refused(accounts: list[Account], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShareTree(accounts)


# -- the priority ------------------------------------------------------------------------

POLICY = PriorityPolicy(
    enabled=True,
    weight_age=1000,
    weight_fairshare=10_000,
    weight_job_size=100,
    weight_partition=1000,
    weight_qos=500,
    max_age_s=10 * DAY,
    qos=(Qos("normal", 0), Qos("high", 100)),
)
PARTITIONS = (Partition("batch", priority_job_factor=1), Partition("fast", priority_job_factor=4))


def test_each_factor_and_the_weighted_sum() -> None:
    calc = MultifactorPriority(POLICY, PARTITIONS)
    job = make_job(1).cpus(4).partition("fast").submitted(0.0).build()
    job = job.evolve(spec=job.spec.with_changes(qos="high", nice=7))
    f = calc.factors(job, now=5 * DAY, fairshare=0.5, cluster_size=(10, 40))
    assert (f.age, f.fairshare, f.partition, f.qos) == (0.5, 0.5, 1.0, 1.0)
    assert f.job_size == pytest.approx(0.1)  # mean of 1/10 nodes and 4/40 cpus
    w = calc.weigh(f)
    assert w.priority == (500 + 5000 + 10 + 1000 + 500) - 7


def test_age_is_capped_and_counts_from_the_begin_time() -> None:
    calc = MultifactorPriority(POLICY, PARTITIONS)
    old = make_job(1).submitted(0.0).build()
    assert calc.factors(old, 100 * DAY, 1.0, (1, 1)).age == 1.0
    later = make_job(2).submitted(0.0).begin(4 * DAY).build()
    assert calc.factors(later, 5 * DAY, 1.0, (1, 1)).age == pytest.approx(0.1)
    assert calc.factors(later, 3 * DAY, 1.0, (1, 1)).age == 0.0


def test_age_counts_from_when_the_job_became_eligible() -> None:
    """As Slurm's: time held or waiting on a dependency is no age. A job released from
    a hold (``eligible_time``) ages from then; one still waiting on its dependency has
    none (both counted from the submit time before)."""
    calc = MultifactorPriority(POLICY, PARTITIONS)
    released = make_job(1).submitted(0.0).build().evolve(eligible_time=9 * DAY)
    assert calc.factors(released, 10 * DAY, 1.0, (1, 1)).age == pytest.approx(0.1)
    waiting = make_job(2).submitted(0.0).build().evolve(reason=PendingReason.DEPENDENCY)
    assert calc.factors(waiting, 10 * DAY, 1.0, (1, 1)).age == 0.0


def test_favor_small_turns_the_job_size_factor_around() -> None:
    small = PriorityPolicy(enabled=True, weight_job_size=100, favor_small=True)
    calc = MultifactorPriority(small, PARTITIONS)
    one = make_job(1).build()
    big = make_job(2).nodes(8).build()
    whole = make_job(3).nodes(8).cpus(8).build()
    assert (
        calc.factors(one, 0.0, 1.0, (8, 64)).job_size
        > calc.factors(big, 0.0, 1.0, (8, 64)).job_size
    )
    # Slurm's: the mean of the node and CPU shares left, (0/8 + 56/64) / 2
    assert calc.factors(big, 0.0, 1.0, (8, 64)).job_size == pytest.approx(0.4375)
    assert calc.factors(whole, 0.0, 1.0, (8, 64)).job_size == 0.0


def test_the_job_size_factor_is_the_mean_of_the_node_and_cpu_shares() -> None:
    """As Slurm 22.05.8 computes it on a one-node, four-CPU cluster: 1, 2 and 3 CPUs
    give 0.625, 0.75 and 0.875 (docs/slurm-checks.md); HAL took the larger share, 1."""
    calc = MultifactorPriority(POLICY, PARTITIONS)
    sizes = [
        calc.factors(make_job(n).cpus(n).build(), 0.0, 1.0, (1, 4)).job_size for n in (1, 2, 3)
    ]
    assert sizes == [0.625, 0.75, 0.875]


def test_the_priority_never_drops_below_one() -> None:
    calc = MultifactorPriority(POLICY, PARTITIONS)
    job = make_job(1).partition("batch").build()
    job = job.evolve(spec=job.spec.with_changes(nice=1_000_000))
    assert calc.weigh(calc.factors(job, 0.0, 0.0, (1, 1))).priority == 1
    assert not math.isnan(calc.factors(job, 0.0, 0.0, (0, 0)).job_size)


def test_limits_and_fair_share_charge_a_job_naming_root_to_root() -> None:
    """Fair share charged ``--account=root`` to root while the limits and the submit
    checks, whose configured accounts leave root out, charged the user's default."""
    from hal.core.priority import ROOT_ACCOUNT, charged_account

    configured = {"phys"}  # the limits' accounts: root is not one of them
    defaults = {"alice": "phys"}
    assert charged_account("root", "alice", configured, defaults) == ROOT_ACCOUNT
    assert charged_account("nope", "alice", configured, defaults) == "phys"
    assert charged_account(None, "bob", configured, defaults) == ROOT_ACCOUNT
