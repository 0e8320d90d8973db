"""Fair tree (Slurm's default fair-share algorithm): Level Fairshare among siblings, a
depth-first ranking of the user associations, factor rank / N. Every tree here is
computed by hand in the test's docstring."""

from __future__ import annotations

import math

import pytest

from hal.core.priority import Account, UserAccount
from hal.scheduler.plugins.multifactor import ShareTree, fair_tree, level_fairshare
from hal.scheduler.plugins.multifactor.fairshare import ShareRow


def _rows(tree: ShareTree, usage: dict[tuple[str, str], float]) -> dict[tuple[str, str], ShareRow]:
    return {(r.account, r.user): r for r in tree.standing(usage).rows}


def _factors(tree: ShareTree, usage: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {k: r.fairshare for k, r in _rows(tree, usage).items() if k[1]}


def test_level_fairshare_is_shares_over_usage_among_the_siblings() -> None:
    assert level_fairshare(1, 2, 30.0, 40.0) == pytest.approx(0.5 / 0.75)
    assert level_fairshare(1, 2, 0.0, 40.0) == math.inf  # used nothing: first
    assert level_fairshare(1, 2, 0.0, 0.0) == math.inf
    assert level_fairshare(0, 2, 0.0, 0.0) == 0.0  # no shares: last, even idle
    assert level_fairshare(0, 0, 5.0, 5.0) == 0.0


def test_two_accounts_with_equal_shares_the_lighter_ones_user_comes_first() -> None:
    """a used 30, b used 10 of 40, equal shares: LF(a) = 0.5/0.75 = 2/3, LF(b) =
    0.5/0.25 = 2. b's user is visited first (rank 2 of 2: 1.0), a's second (0.5)."""
    tree = ShareTree(
        [Account("a"), Account("b")], [UserAccount("ua", "a"), UserAccount("ub", "b")], "fair_tree"
    )
    rows = _rows(tree, {("a", "ua"): 30.0, ("b", "ub"): 10.0})
    a, b = rows[("a", "")], rows[("b", "")]
    assert a.level_fs == pytest.approx(2 / 3) and b.level_fs == pytest.approx(2.0)
    # sshare's fair-tree columns: NormShares and EffectvUsage among the siblings
    assert (a.norm_shares, a.effective_usage) == (pytest.approx(0.5), pytest.approx(0.75))
    assert (b.norm_shares, b.effective_usage) == (pytest.approx(0.5), pytest.approx(0.25))
    assert a.norm_usage == pytest.approx(0.75)  # NormUsage stays usage / all usage
    # each user is alone in its account: S = U = 1
    assert rows[("a", "ua")].level_fs == pytest.approx(1.0)
    assert rows[("b", "ub")].fairshare == 1.0
    assert rows[("a", "ua")].fairshare == 0.5
    assert tree.standing({("a", "ua"): 30.0, ("b", "ub"): 10.0}).factor("a", "ua") == 0.5


def _deep_tree() -> ShareTree:
    return ShareTree(
        [Account("physics", shares=2), Account("chem", shares=1), Account("lattice", "physics")],
        [
            UserAccount("alice", "lattice"),
            UserAccount("dave", "lattice"),
            UserAccount("carol", "physics"),
            UserAccount("bob", "chem"),
        ],
        "fair_tree",
    )


def test_every_user_of_a_heavy_account_ranks_below_every_user_of_a_light_one() -> None:
    """physics (2 shares) used 60 of 70 (alice in lattice), chem (1 share) 10 (bob).

    root:    LF(physics) = (2/3)/(60/70) = 7/9,  LF(chem) = (1/3)/(10/70) = 7/3
    physics: LF(carol) = inf (idle), LF(lattice) = 0.5/1 = 0.5
    lattice: LF(dave) = inf (idle), LF(alice) = 0.5/1 = 0.5

    Walk: chem (bob: rank 4), physics → carol (3), lattice → dave (2), alice (1).
    dave and carol used nothing, yet they rank below bob: their account over-used."""
    usage = {("lattice", "alice"): 60.0, ("chem", "bob"): 10.0}
    rows = _rows(_deep_tree(), usage)
    assert rows[("physics", "")].level_fs == pytest.approx(7 / 9)
    assert rows[("chem", "")].level_fs == pytest.approx(7 / 3)
    assert rows[("physics", "carol")].level_fs == math.inf
    assert rows[("lattice", "")].level_fs == pytest.approx(0.5)
    assert _factors(_deep_tree(), usage) == {
        ("chem", "bob"): 1.0,
        ("physics", "carol"): 0.75,
        ("lattice", "dave"): 0.5,
        ("lattice", "alice"): 0.25,
    }
    # accounts have no fair-tree factor (sshare prints it empty)
    assert rows[("physics", "")].fairshare == 0.0


def test_without_usage_everyone_ties_first() -> None:
    """No usage anywhere: every LF is inf, all siblings tie at every level, so every
    user gets the first rank: 1.0."""
    rows = _rows(_deep_tree(), {})
    assert all(r.level_fs == math.inf for k, r in rows.items() if k != ("root", ""))
    assert rows[("root", "")].level_fs is None
    assert set(_factors(_deep_tree(), {}).values()) == {1.0}


def test_a_user_with_zero_shares_gets_zero_and_takes_no_rank() -> None:
    """a: u1 (1 share, used 10), u0 (0 shares); b: v (used 30). N = 2 (u0 is not ranked).
    root: LF(a) = 0.5/0.25 = 2, LF(b) = 0.5/0.75 = 2/3.  a: LF(u1) = 1/1 = 1, LF(u0) = 0.
    Walk: a → u1 (rank 2: 1.0), u0 (0); b → v (rank 1: 0.5)."""
    tree = ShareTree(
        [Account("a"), Account("b")],
        [UserAccount("u1", "a"), UserAccount("u0", "a", shares=0), UserAccount("v", "b")],
        "fair_tree",
    )
    usage = {("a", "u1"): 10.0, ("b", "v"): 30.0}
    rows = _rows(tree, usage)
    assert rows[("a", "u0")].level_fs == 0.0 and rows[("a", "u1")].level_fs == 1.0
    assert _factors(tree, usage) == {("a", "u1"): 1.0, ("a", "u0"): 0.0, ("b", "v"): 0.5}


def test_an_account_with_zero_shares_comes_last_even_idle() -> None:
    """z has 0 shares and used nothing: LF(z) = 0, so w (its user) ranks after x, whose
    account used everything (LF(a) = 0.5/1)."""
    tree = ShareTree(
        [Account("a"), Account("z", shares=0)],
        [UserAccount("x", "a"), UserAccount("w", "z")],
        "fair_tree",
    )
    usage = {("a", "x"): 5.0}
    assert _rows(tree, usage)[("z", "")].level_fs == 0.0
    assert _factors(tree, usage) == {("a", "x"): 1.0, ("z", "w"): 0.5}


def test_tied_users_share_a_rank_and_the_next_one_skips_it() -> None:
    """a: u1 and u2 used 10 each, u3 20 (of 40, equal shares).
    LF(u1) = LF(u2) = (1/3)/(1/4) = 4/3, LF(u3) = (1/3)/(1/2) = 2/3.
    u1, u2 tie: both rank 3 (1.0); u3 is ranked after two users: rank 1 (1/3)."""
    tree = ShareTree(
        [Account("a")],
        [UserAccount("u1", "a"), UserAccount("u2", "a"), UserAccount("u3", "a")],
        "fair_tree",
    )
    usage = {("a", "u1"): 10.0, ("a", "u2"): 10.0, ("a", "u3"): 20.0}
    assert _factors(tree, usage) == {
        ("a", "u1"): 1.0,
        ("a", "u2"): 1.0,
        ("a", "u3"): pytest.approx(1 / 3),
    }


def test_tied_accounts_have_their_children_ranked_together() -> None:
    """a and b have equal shares and used 40 each: they tie, so their users are ranked
    in one list. a: x used 30 (LF 0.5/0.75 = 2/3), y 10 (LF 0.5/0.25 = 2); b: z used
    40 (alone: LF 1). Merged: y (rank 3), z (2), x (1). Without the merge a's users
    would both come before z."""
    tree = ShareTree(
        [Account("a"), Account("b")],
        [UserAccount("x", "a"), UserAccount("y", "a"), UserAccount("z", "b")],
        "fair_tree",
    )
    usage = {("a", "x"): 30.0, ("a", "y"): 10.0, ("b", "z"): 40.0}
    assert _factors(tree, usage) == {
        ("a", "y"): 1.0,
        ("b", "z"): pytest.approx(2 / 3),
        ("a", "x"): pytest.approx(1 / 3),
    }


def test_a_tie_carries_down_into_the_first_group_of_the_tied_accounts_children() -> None:
    """At root, user r (root's own association) and account a both used 10 of 20 with
    equal shares: LF 1 each, one tie group; its users come first: r gets rank 3 of 3.
    a's children: q used 2 (LF 0.5/0.2 = 2.5), s used 8 (LF 0.5/0.8 = 0.625). q is a's
    first group, so it continues r's tie (rank 3); s comes after an LF drop: rank 1."""
    tree = ShareTree(
        [Account("a")],
        [UserAccount("r", "root"), UserAccount("q", "a"), UserAccount("s", "a")],
        "fair_tree",
    )
    usage = {("root", "r"): 10.0, ("a", "q"): 2.0, ("a", "s"): 8.0}
    assert _factors(tree, usage) == {
        ("root", "r"): 1.0,
        ("a", "q"): 1.0,
        ("a", "s"): pytest.approx(1 / 3),
    }


def test_unconfigured_associations_are_ranked_with_one_share() -> None:
    """A job's (account, user) the config does not name is a leaf with 1 share."""
    tree = ShareTree([Account("a")], [UserAccount("u", "a")], "fair_tree")
    standing = tree.standing({("a", "u"): 10.0}, extra=[("a", "newcomer")])
    assert standing.factor("a", "newcomer") == 1.0  # used nothing: LF inf
    assert standing.factor("a", "u") == 0.5
    assert standing.factor("a", "never-seen") == 1.0  # not in the tree at all


def test_fair_tree_function_on_a_plain_mapping() -> None:
    """The pure function: children per account, with shares and subtree usage."""
    result = fair_tree(
        {
            "root": [("a", "", 1, 30.0), ("b", "", 1, 10.0)],
            "a": [("a", "u", 1, 30.0)],
            "b": [("b", "v", 1, 10.0)],
        }
    )
    assert result.ranked == 2
    assert result.rank == {("b", "v"): 2, ("a", "u"): 1}
    assert result.factor == {("b", "v"): 1.0, ("a", "u"): 0.5}


def test_classic_stays_the_default_and_a_wrong_algorithm_is_refused() -> None:
    assert ShareTree().algorithm == "classic"
    classic = ShareTree([Account("a")], [UserAccount("u", "a")])
    row = classic.standing({("a", "u"): 1.0}).row("a", "u")
    assert row is not None and row.level_fs is None
    with pytest.raises(ValueError, match="fair-share algorithm"):
        ShareTree(algorithm="fairest")  # type: ignore[arg-type]


def test_ten_thousand_associations() -> None:
    """A site-sized tree (10 organisations x 10 projects x 100 users = 10,000 user
    associations): every user is ranked, the factors are rank / N (no wall-time
    assertion here; the timing is measured by hand, docs/admin/priority.md)."""
    accounts = [Account(f"org{o}") for o in range(10)]
    accounts += [Account(f"p{o}.{p}", f"org{o}") for o in range(10) for p in range(10)]
    users = [
        UserAccount(f"u{o}.{p}.{u}", f"p{o}.{p}")
        for o in range(10)
        for p in range(10)
        for u in range(100)
    ]
    usage = {(ua.account, ua.user): float(i % 97) for i, ua in enumerate(users)}
    standing = ShareTree(accounts, users, "fair_tree").standing(usage)
    factors = [r.fairshare for r in standing.rows if r.user]
    assert len(factors) == 10_000
    assert max(factors) == 1.0 and min(factors) > 0.0
    assert all(0.0 < f <= 1.0 for f in factors)


@pytest.mark.timeout(10)
def test_a_usage_that_overflows_to_nan_does_not_hang_the_walk() -> None:
    """Usage sums near 1e308 overflow to inf, and inf/inf is a NaN level fairshare: the
    tie loop compared it with itself (never equal) and looped for ever."""
    huge = 1e308
    result = fair_tree(
        {
            "root": [("a", "", 1, huge * 10), ("b", "", 1, huge * 10)],
            "a": [("a", "u", 1, huge * 10)],
            "b": [("b", "v", 1, huge * 10)],
        }
    )
    assert result.ranked == 2 and set(result.rank) == {("a", "u"), ("b", "v")}
