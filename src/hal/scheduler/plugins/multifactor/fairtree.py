"""Fair tree: Slurm's default fair-share algorithm (``PriorityFlags`` without
``NO_FAIR_TREE``), a ranking of every user association instead of a formula.

At every level of the account tree each association (sub-account or user) gets its
**Level Fairshare** among its siblings::

    S  = shares(n) / Σ shares(n and its siblings)
    U  = usage(n)  / Σ usage(n and its siblings)       (usage of n's whole subtree)
    LF = S / U        = +inf when U = 0 (nothing used: ranked first)
                      = 0    when shares(n) = 0 (ranked last, even with no usage)

Then the tree is walked depth first, the siblings of each level in decreasing LF, and
every user association is given a rank as it is reached: the first gets N (the number
of ranked user associations), the next N − 1, ... The fair-share factor is
``rank / N``: the first user gets 1.0, the last 1/N (unless it ties). So every user
of an account with a higher LF than a sibling account comes before (gets a higher
factor than) every user of that sibling, however they compare with each other: an
account that over-used pushes all its users down together.

Ties (equal LF, compared exactly) — associations with equal LF get the same rank:

* sibling **users** with the same LF get the same rank, the rank the first of them
  would get; the next user after them is ranked as if they had not tied (N, N, N − 2:
  "competition" ranking), which is how Slurm's ``rank``/``rnt`` counters work;
* sibling **accounts** with the same LF are merged: their children are ranked together
  in one list, as if they were one account (each child keeps the LF it has under its
  own parent);
* when users and accounts tie, the users come first, then the accounts' merged children;
* the tie carries down: the first (highest-LF) group of the merged children of a tie
  group gets the tie group's rank (Slurm passes ``account_tied`` down the same way).
  So when nothing has been used anywhere every LF is infinite and every user gets 1.0.

In other words a new rank starts only where an LF drops: a user gets the rank of the
user before it in the walk unless, since that user, the walk moved on to a lower-LF
sibling group somewhere.

Users with 0 shares get the factor 0, take no rank and are not counted in N. Users of
an account with 0 shares are ranked normally, after all the account's siblings (its LF
is 0).

Everything is pure and deterministic: equal LFs are ordered by name, and the walk is
iterative (no recursion limit on deep trees). It is O(n log n) in the number of
associations: 10,000 take a few tens of milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hal.core.priority import ROOT_ACCOUNT

Child = tuple[str, str, int, float]  # (account, user or "" for a sub-account, shares, usage)
Key = tuple[str, str]  # (account, user); user "" for an account


def level_fairshare(shares: int, level_shares: int, usage: float, level_usage: float) -> float:
    """LF = (shares / level_shares) / (usage / level_usage); +inf without usage, 0
    without shares. Computed as one division of two products, so that siblings with
    the same shares and usage tie exactly."""
    if shares <= 0 or level_shares <= 0:
        return 0.0
    if usage <= 0 or level_usage <= 0:
        return math.inf
    return (shares * level_usage) / (level_shares * usage)


@dataclass(frozen=True, slots=True)
class FairTree:
    """The result: ``level_fs`` of every association below root (accounts under
    ``(name, "")``), ``factor`` and ``rank`` of every user association (0 and 0 for one
    without shares), and ``ranked`` (N: the user associations with shares)."""

    level_fs: dict[Key, float]
    factor: dict[Key, float]
    rank: dict[Key, int]
    ranked: int


_Entry = tuple[float, bool, str, str, int]  # (−LF, is an account, account, user, shares)


def _sorted(siblings: Sequence[Child], level_fs: Mapping[Key, float]) -> list[_Entry]:
    """The siblings in reverse walk order (``pop()`` takes the next): decreasing LF,
    users before accounts on a tie, then by name. Plain tuples, compared natively."""
    entries = [(-level_fs[(a, u)], not u, a, u, shares) for a, u, shares, _ in siblings]
    entries.sort(reverse=True)
    return entries


def fair_tree(children: Mapping[str, Sequence[Child]], root: str = ROOT_ACCOUNT) -> FairTree:
    """Rank the user associations of the tree ``children`` (account name → its
    sub-accounts and users, each with its raw shares and the usage of its subtree).
    ``children`` must be a tree under ``root``: every user with shares is reached once
    (N counts them all). A sub-account ``(name, "", ...)`` without an entry has no
    children."""
    level_fs: dict[Key, float] = {}
    ranked = 0
    for kids in children.values():
        level_shares = sum(max(shares, 0) for _, _, shares, _ in kids)
        level_usage = sum(max(usage, 0.0) for _, _, _, usage in kids)
        for account, user, shares, usage in kids:
            level_fs[(account, user)] = level_fairshare(shares, level_shares, usage, level_usage)
            if user and shares > 0:
                ranked += 1

    factor: dict[Key, float] = {}
    rank: dict[Key, int] = {}
    remaining = ranked  # Slurm's ``rnt``: the rank the next user gets unless tied
    current = ranked  # the rank of the last tie
    tie_open = False  # no LF has dropped since the last ranked user: the next one ties
    # depth first without recursion: the sibling lists still to walk (each sorted so that
    # ``pop()`` gives the highest LF) and, for each, whether no tie group is taken yet
    stack: list[list[_Entry]] = [_sorted(children.get(root, ()), level_fs)]
    fresh: list[bool] = [True]
    while stack:
        level = stack[-1]
        if not level:
            stack.pop()
            fresh.pop()
            continue
        if fresh[-1]:
            fresh[-1] = False  # a list's first group continues the tie of its parent's group
        else:
            tie_open = False  # a later group: its LF is lower than the previous group's
        # the tie group: the siblings with the LF of the first one (users sort first)
        negative_lf = level[-1][0]
        merged: list[Child] = []
        taken = 0  # (the first is always taken: a NaN LF equals nothing, itself included)
        while level and (not taken or level[-1][0] == negative_lf):
            taken += 1
            _, is_account, account, user, shares = level.pop()
            if is_account:
                merged.extend(children.get(account, ()))
            elif shares <= 0:
                factor[(account, user)] = 0.0
                rank[(account, user)] = 0
            else:
                if not tie_open:
                    current = remaining
                    tie_open = True
                factor[(account, user)] = current / ranked
                rank[(account, user)] = current
                remaining -= 1
        if merged:
            stack.append(_sorted(merged, level_fs))
            fresh.append(True)
    return FairTree(level_fs, factor, rank, ranked)
