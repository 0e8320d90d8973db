"""Fair tree over random account trees, shares and usage: every factor is in [0, 1],
users without shares get 0, the first-ranked user gets 1, and the ranking respects the
Level Fairshare at every level: when an association has a higher LF than a sibling,
every (ranked) user under it gets a higher factor than every user under the sibling —
however much the individual users used. Usage is drawn from a few values so that ties
(and merged accounts) are common."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hal.core.priority import ROOT_ACCOUNT, Account, UserAccount
from hal.scheduler.plugins.multifactor import ShareTree
from hal.scheduler.plugins.multifactor.fairshare import ShareRow
from hal.testing.examples import examples

ACCOUNTS = ("a", "b", "c", "d", "e", "f")
USERS = ("u1", "u2", "u3", "u4")
USAGE = st.sampled_from([0.0, 0.0, 1.0, 2.0, 5.0, 10.0, 37.5])


@st.composite
def trees(draw: st.DrawFn) -> tuple[ShareTree, dict[tuple[str, str], float]]:
    accounts: list[Account] = []
    for i, name in enumerate(ACCOUNTS[: draw(st.integers(1, len(ACCOUNTS)))]):
        # a parent among the accounts made before: any tree shape, no cycle
        parent = draw(st.sampled_from([ROOT_ACCOUNT, *(a.name for a in accounts[:i])]))
        accounts.append(Account(name, parent, draw(st.integers(0, 3))))
    names = [ROOT_ACCOUNT, *(a.name for a in accounts)]
    users: list[UserAccount] = []
    usage: dict[tuple[str, str], float] = {}
    for account in names:
        for user in draw(st.lists(st.sampled_from(USERS), unique=True, max_size=3)):
            users.append(UserAccount(user, account, draw(st.integers(0, 3))))
            usage[(account, user)] = draw(USAGE)
    return ShareTree(accounts, users, "fair_tree"), usage


def _users_under(rows: tuple[ShareRow, ...], node: ShareRow) -> list[ShareRow]:
    """The user associations of ``node``'s subtree (``node`` itself for a user)."""
    if node.user:
        return [node]
    inside = {node.account}
    found: list[ShareRow] = []
    for row in rows:  # sshare order: a parent comes before its children
        if row.parent in inside and row.depth > node.depth:
            if row.user:
                found.append(row)
            else:
                inside.add(row.account)
    return found


@settings(max_examples=examples(300), deadline=None)
@given(trees())
def test_factors_are_in_range_and_respect_the_level_fairshare(
    case: tuple[ShareTree, dict[tuple[str, str], float]],
) -> None:
    tree, usage = case
    standing = tree.standing(usage)
    rows = standing.rows
    users = [r for r in rows if r.user]
    assert all(0.0 <= r.fairshare <= 1.0 for r in users)
    assert all(r.fairshare == 0.0 for r in users if r.raw_shares == 0)
    ranked = [r for r in users if r.raw_shares > 0]
    assert all(r.fairshare > 0.0 for r in ranked)
    if ranked:
        assert max(r.fairshare for r in ranked) == 1.0
        assert min(r.fairshare for r in ranked) >= 1 / len(ranked)
    below_root = [r for r in rows if r.depth > 0]
    assert all(r.level_fs is not None and r.level_fs >= 0.0 for r in below_root)
    # the key property, at every level
    for first in below_root:
        for second in below_root:
            if first.parent != second.parent or first is second:
                continue
            assert first.level_fs is not None and second.level_fs is not None
            if first.level_fs <= second.level_fs:
                continue
            better = [u for u in _users_under(rows, first) if u.raw_shares > 0]
            worse = [u for u in _users_under(rows, second) if u.raw_shares > 0]
            for u in better:
                for v in worse:
                    assert u.fairshare > v.fairshare, (first, second, u, v)
    # pure: the same input gives the same answer
    assert tree.standing(dict(usage)).rows == rows
