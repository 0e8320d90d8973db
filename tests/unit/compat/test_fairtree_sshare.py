"""``sshare`` with fair tree: ``FairShare`` is the rank factor, accounts have none, and
``-l`` adds Slurm's ``LevelFS`` column (``inf`` for an association that used nothing;
empty with the classic algorithm). The rows are the real calculation's, carried over
the wire schema."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from compat_fakes import FakeClient, answered, call

from hal.core.priority import Account, FairshareAlgorithm, UserAccount
from hal.scheduler.plugins.multifactor import ShareTree
from hal.wire.priority import LEVEL_FS_INFINITE, ShareInfo, ShareList

USAGE = {("lattice", "alice"): 60.0, ("chem", "bob"): 10.0}


def _rows(algorithm: FairshareAlgorithm) -> list[ShareInfo]:
    """physics (2 shares) → carol, lattice → alice; chem (1 share) → bob."""
    tree = ShareTree(
        [Account("physics", shares=2), Account("chem"), Account("lattice", "physics")],
        [
            UserAccount("alice", "lattice"),
            UserAccount("carol", "physics"),
            UserAccount("bob", "chem"),
        ],
        algorithm,
    )
    return [
        ShareInfo(
            account=r.account,
            user=r.user,
            parent=r.parent,
            depth=r.depth,
            raw_shares=r.raw_shares,
            norm_shares=r.norm_shares,
            raw_usage=r.raw_usage,
            norm_usage=r.norm_usage,
            effective_usage=r.effective_usage,
            fairshare=r.fairshare,
            level_fs=r.level_fs,
        )
        for r in tree.standing(USAGE).rows
    ]


@dataclass
class ShareClient(FakeClient):
    algorithm: FairshareAlgorithm = "fair_tree"
    calls: list[dict[str, Any]] = field(default_factory=list)

    def shares(self, *, validate: bool = True, **query: Any) -> ShareList:
        self.calls.append(query)
        found = ShareList(decay_half_life_seconds=604800, rows=_rows(self.algorithm))
        return answered(found, validate=validate, schema="priority.ShareList")  # type: ignore[no-any-return]


def test_fair_tree_long_parsable_has_level_fs_and_rank_factors() -> None:
    """root: LF(physics) = (2/3)/(6/7) = 7/9, LF(chem) = (1/3)/(1/7) = 7/3.
    physics: carol idle (inf), lattice 0.5/1 = 0.5. Walk: bob 3/3, carol 2/3, alice 1/3."""
    r = call(ShareClient(), "sshare", "-a", "-l", "-P")
    assert r.rc == 0, r.err
    assert r.lines == [
        "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS"
        "|GrpTRESMins|TRESRunMins",
        "root|||1.000000|70|1.000000|1.000000||||",
        "chem||1|0.333333|10|0.142857|0.142857||2.333333||",
        "chem|bob|1|1.000000|10|0.142857|1.000000|1.000000|1.000000||",
        "physics||2|0.666667|60|0.857143|0.857143||0.777778||",
        "physics|carol|1|0.500000|0|0.000000|0.000000|0.666667|inf||",
        "lattice||1|0.500000|60|0.857143|1.000000||0.500000||",
        "lattice|alice|1|1.000000|60|0.857143|1.000000|0.333333|1.000000||",
    ]


def test_fair_tree_table_without_long_keeps_slurms_default_columns() -> None:
    client = ShareClient(user="carol")
    r = call(client, "sshare")
    assert client.calls[-1] == {"users": ["carol"], "accounts": None}
    assert r.lines[0].split() == [
        "Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare",
    ]  # fmt: skip
    carol = next(line for line in r.lines if " carol " in line)
    assert carol.split()[-1] == "0.666667"
    long = call(ShareClient(), "sshare", "-a", "-l")
    # Slurm 22.05.8's -l columns, each line ending in a blank
    assert long.lines[0].split()[-4:] == ["FairShare", "LevelFS", "GrpTRESMins", "TRESRunMins"]
    widths = (20, 10, 10, 11, 11, 11, 13, 10, 10, 30, 30)
    assert long.lines[1] == " ".join("-" * w for w in widths) + " "
    assert long.lines[2].split() == ["root", "1.000000", "70", "1.000000", "1.000000"]
    assert long.lines[6].split()[-2:] == ["0.666667", "inf"]  # carol


def test_classic_prints_level_fs_empty() -> None:
    r = call(ShareClient(algorithm="classic"), "sshare", "-a", "-l", "-P", "-n")
    assert all(line.endswith("|") for line in r.lines)  # LevelFS empty on every row
    bob = next(line for line in r.lines if line.startswith("chem|bob|"))
    assert bob.split("|")[7] != ""  # classic accounts and users both have a factor
    chem = next(line for line in r.lines if line.startswith("chem||"))
    assert chem.split("|")[7] != ""


def test_an_infinite_level_fs_crosses_json_as_slurms_no_val() -> None:
    carol = next(row for row in _rows("fair_tree") if row.user == "carol")
    assert carol.level_fs == LEVEL_FS_INFINITE
    again = ShareInfo.model_validate_json(carol.model_dump_json())
    assert again.level_fs == LEVEL_FS_INFINITE and not math.isinf(again.level_fs)
    classic = next(row for row in _rows("classic") if row.user == "carol")
    assert classic.level_fs is None
    assert ShareInfo.model_validate_json(classic.model_dump_json()).level_fs is None
