"""Fair share over the account tree: Slurm's classic algorithm (``PriorityFlags=NO_FAIR_TREE``)
here, fair tree in ``fairtree.py``; ``ShareTree(..., algorithm=)`` picks one.

The tree: ``root`` → accounts (organisation → project → ...) → user associations (a
user under an account). At every level the siblings (sub-accounts and users alike) split
their parent's share by their raw shares::

    NormShares(n)   = NormShares(parent) · shares(n) / Σ shares(siblings of n, n included)
    NormUsage(n)    = RawUsage(subtree of n) / RawUsage(everything)
    EffectvUsage(n) = NormUsage(n)                                  under root
                    = NormUsage(n) + (EffectvUsage(parent) − NormUsage(n))
                                     · shares(n) / Σ shares(siblings)   deeper
    FairShare(n)    = 2^(−EffectvUsage(n) / NormShares(n))              (0 if no shares)

So an association that used exactly its share gets 0.5, an idle one tends to 1, one that
used twice its share 0.25; a user also inherits part of the account's over- or
under-use. These are the numbers ``sshare`` prints.

With ``algorithm="fair_tree"`` the rows carry what Slurm's ``sshare`` shows under fair
tree: NormShares and EffectvUsage relative to the siblings (S and U of ``fairtree.py``),
``level_fs`` = S / U, and the users' factor ``rank / N``; account rows have no factor
(0.0; ``sshare`` prints it empty). Classic rows have ``level_fs`` None.

Users need not be configured: a job's (account, user) pair that the config does not
name becomes a leaf with 1 share (Slurm would refuse the job without an association;
HAL charges it instead, so no usage goes unaccounted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hal.core.priority import (
    ROOT_ACCOUNT,
    Account,
    FairshareAlgorithm,
    UserAccount,
    charged_account,
)
from hal.scheduler.plugins.multifactor.fairtree import Child, fair_tree
from hal.scheduler.plugins.multifactor.usage import Assoc


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One line of ``sshare``: an account (``user == ""``) or a user association."""

    account: str
    user: str
    depth: int  # 0 for root
    parent: str  # the account above ("" for root)
    raw_shares: int
    norm_shares: float
    raw_usage: float
    norm_usage: float
    effective_usage: float
    fairshare: float
    level_fs: float | None = None  # fair tree's S / U (inf: no usage); None with classic


class ShareTree:
    """The configured accounts and user associations. Raises ``ValueError`` for an
    unknown parent, a cycle or a duplicate (the config layer reports it with the field)."""

    def __init__(
        self,
        accounts: Sequence[Account] = (),
        users: Sequence[UserAccount] = (),
        algorithm: FairshareAlgorithm = "classic",
    ) -> None:
        if algorithm not in ("classic", "fair_tree"):
            raise ValueError(f"unknown fair-share algorithm {algorithm!r}")
        self.algorithm: FairshareAlgorithm = algorithm
        self.accounts: dict[str, Account] = {ROOT_ACCOUNT: Account(ROOT_ACCOUNT, "", 1)}
        for acct in accounts:
            if acct.name in self.accounts:
                raise ValueError(f"account {acct.name!r} is defined twice")
            self.accounts[acct.name] = acct
        for acct in accounts:
            if acct.parent not in self.accounts:
                raise ValueError(f"account {acct.name!r} has an unknown parent {acct.parent!r}")
            seen = {acct.name}
            up = acct.parent
            while up != ROOT_ACCOUNT:
                if up in seen:
                    raise ValueError(f"account {acct.name!r} is its own ancestor")
                seen.add(up)
                up = self.accounts[up].parent
        self.users: dict[Assoc, UserAccount] = {}
        self.defaults: dict[str, str] = {}
        for ua in users:
            if ua.account not in self.accounts:
                raise ValueError(f"user {ua.user!r} is in an unknown account {ua.account!r}")
            key = (ua.account, ua.user)
            if key in self.users:
                raise ValueError(f"user {ua.user!r} is in account {ua.account!r} twice")
            self.users[key] = ua
            if ua.default or ua.user not in self.defaults:
                self.defaults[ua.user] = ua.account

    def account_for(self, user: str, requested: str | None) -> str:
        """The account a job of ``user`` is charged to: the one it asked for when it
        exists, else the user's default account, else ``root``."""
        return charged_account(requested, user, self.accounts, self.defaults)

    def standing(self, usage: Mapping[Assoc, float], extra: Iterable[Assoc] = ()) -> Standing:
        """Every association's shares, usage and fair-share factor for ``usage``;
        ``extra`` adds (unconfigured) associations that have no usage yet."""
        leaves: dict[Assoc, int] = {k: ua.shares for k, ua in self.users.items()}
        for key in (*usage, *extra):
            if key[0] in self.accounts:  # ``account_for`` never gives an unknown one
                leaves.setdefault(key, 1)
        sub: dict[str, list[str]] = {a: [] for a in self.accounts}
        for acct in self.accounts.values():
            if acct.name != ROOT_ACCOUNT:
                sub[acct.parent].append(acct.name)
        members: dict[str, list[str]] = {a: [] for a in self.accounts}
        for account, user in leaves:
            members[account].append(user)

        account_usage: dict[str, float] = {}

        def subtree_usage(name: str) -> float:
            total = sum(usage.get((name, u), 0.0) for u in members[name])
            total += sum(subtree_usage(child) for child in sub[name])
            account_usage[name] = total
            return total

        grand = subtree_usage(ROOT_ACCOUNT)
        # every account's children in sshare order: users, then sub-accounts, by name
        level_children: dict[str, list[Child]] = {
            name: [(name, u, leaves[(name, u)], usage.get((name, u), 0.0)) for u in sorted(users)]
            + [(a, "", self.accounts[a].shares, account_usage[a]) for a in sorted(sub[name])]
            for name, users in members.items()
        }
        tree = fair_tree(level_children) if self.algorithm == "fair_tree" else None
        rows: list[ShareRow] = []

        def visit(name: str, depth: int, norm_shares: float, effective: float) -> None:
            children = level_children[name]
            level = sum(shares for _, _, shares, _ in children)
            for account, user, shares, raw in children:
                fraction = shares / level if level > 0 else 0.0
                norm_usage = raw / grand if grand > 0 else 0.0
                if tree is not None:
                    # fair tree: S, U and LF among the siblings; users' factor rank / N
                    level_usage = account_usage[name]
                    child_shares = fraction
                    child_effective = raw / level_usage if level_usage > 0 else 0.0
                    level_fs: float | None = tree.level_fs[(account, user)]
                    factor = tree.factor.get((account, user), 0.0) if user else 0.0
                else:
                    child_shares = norm_shares * fraction
                    if name == ROOT_ACCOUNT:
                        child_effective = norm_usage
                    else:
                        child_effective = norm_usage + (effective - norm_usage) * fraction
                    level_fs = None
                    factor = 2.0 ** (-child_effective / child_shares) if child_shares > 0 else 0.0
                rows.append(
                    ShareRow(
                        account=account,
                        user=user,
                        depth=depth + 1,
                        parent=name,
                        raw_shares=shares,
                        norm_shares=child_shares,
                        raw_usage=raw,
                        norm_usage=norm_usage,
                        effective_usage=child_effective,
                        fairshare=factor,
                        level_fs=level_fs,
                    )
                )
                if not user:
                    visit(account, depth + 1, child_shares, child_effective)

        root = ShareRow(ROOT_ACCOUNT, "", 0, "", 0, 1.0, grand, 1.0, 1.0, 1.0)
        rows.append(root)
        visit(ROOT_ACCOUNT, 0, 1.0, 1.0)
        return Standing(tuple(rows))


class Standing:
    """The fair-share picture at one moment, in ``sshare`` order (depth first, users
    before sub-accounts, each by name)."""

    __slots__ = ("_by_key", "rows")

    def __init__(self, rows: tuple[ShareRow, ...]) -> None:
        self.rows = rows
        self._by_key = {(r.account, r.user): r for r in rows}

    def row(self, account: str, user: str = "") -> ShareRow | None:
        return self._by_key.get((account, user))

    def factor(self, account: str, user: str) -> float:
        """The fair-share factor of ``user`` in ``account`` (1.0 if unknown: a newcomer
        has used nothing)."""
        row = self.row(account, user)
        return row.fairshare if row is not None else 1.0
