"""sshare ``-U`` (user rows only), ``-o/--format`` field lists with ``%width``,
``-e/--helpformat``, and the TRESRunMins column, against hand-written lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compat_fakes import FakeClient, answered, call

from hal.wire.priority import ShareInfo, ShareList

IDLE_TRES = {"cpu": 0, "mem": 0, "node": 0, "billing": 0, "gres/gpu": 0}


def _row(account: str, user: str, depth: int, usage: float, **more: Any) -> ShareInfo:
    values: dict[str, Any] = {
        "account": account,
        "user": user,
        "parent": {0: "", 1: "root"}.get(depth, "physics"),
        "depth": depth,
        "raw_shares": 1,
        "norm_shares": 0.5,
        "raw_usage": usage,
        "norm_usage": 0.25,
        "effective_usage": 0.25,
        "fairshare": 0.574349,
        "tres_run_minutes": IDLE_TRES,
    }
    values.update(more)
    return ShareInfo(**values)


@dataclass
class ShareClient(FakeClient):
    share_calls: list[dict[str, Any]] = field(default_factory=list)

    def shares(self, *, validate: bool = True, **query: Any) -> ShareList:
        self.share_calls.append(query)
        running = {"cpu": 120, "mem": 245760, "node": 1, "billing": 120, "gres/gpu": 0}
        rows = [
            _row("root", "", 0, 1200.4, raw_shares=0, norm_shares=1.0, tres_run_minutes=running),
            _row("physics", "", 1, 1200.4, tres_run_minutes=running),
            _row("physics", "alice", 2, 800.0, tres_run_minutes=running),
            _row("physics", "bob", 2, 400.4),
        ]
        found = ShareList(decay_half_life_seconds=604800, rows=rows)
        return answered(found, validate=validate, schema="priority.ShareList")  # type: ignore[no-any-return]


def test_users_only_drops_the_account_lines() -> None:
    client = ShareClient(user="alice")
    r = call(client, "sshare", "-U", "-n", "-P")
    assert client.share_calls[-1] == {"users": ["alice"], "accounts": None}
    assert r.lines == [
        "physics|alice|1|0.500000|800|0.250000|0.574349",
        "physics|bob|1|0.500000|400|0.250000|0.574349",
    ]
    assert call(ShareClient(), "sshare", "--Users", "-a", "-n", "-P").lines == r.lines


def test_format_picks_fields_and_widths() -> None:
    r = call(ShareClient(), "sshare", "-a", "-o", "Account,User%6,RawUsage,TRESRunMins%48")
    assert r.rc == 0, r.err
    tres = "cpu=120,mem=245760,node=1,billing=120,gres/gpu=0"
    assert r.lines == [
        "Account                User    RawUsage " + "TRESRunMins".rjust(48) + " ",
        "-------------------- ------ ----------- " + "-" * 48 + " ",
        "root                               1200 " + tres + " ",
        " physics                           1200 " + tres + " ",
        "  physics             alice         800 " + tres + " ",
        "  physics               bob         400 "
        + "cpu=0,mem=0,node=0,billing=0,gres/gpu=0".rjust(48)
        + " ",
    ]


def test_a_value_too_long_is_cut_with_a_plus() -> None:
    r = call(ShareClient(), "sshare", "-a", "-n", "--format=User,TRESRunMins")
    # TRESRunMins is 30 wide, as in Slurm 22.05.8's sshare -l
    assert r.lines[2] == "     alice cpu=120,mem=245760,node=1,bil+ "


def test_format_parsable_with_every_field() -> None:
    fields = (
        "Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,"
        "LevelFS,GrpTRESMins,TRESRunMins"
    )
    r = call(ShareClient(), "sshare", "-a", "-p", "-o", fields.lower())
    assert r.lines[0] == fields.replace(",", "|") + "|"
    assert r.lines[4] == (
        "physics|bob|1|0.500000|400|0.250000|0.250000|0.574349|||"
        "cpu=0,mem=0,node=0,billing=0,gres/gpu=0|"
    )


def test_helpformat_lists_the_fields() -> None:
    r = call(ShareClient(), "sshare", "-e")
    assert r.rc == 0
    assert " ".join(r.lines).split() == sorted(
        [
            "Account", "EffectvUsage", "FairShare", "GrpTRESMins", "LevelFS", "NormShares",
            "NormUsage", "RawShares", "RawUsage", "TRESRunMins", "User",
        ]
    )  # fmt: skip


def test_bad_formats_say_what_to_write() -> None:
    bad = call(ShareClient(), "sshare", "-o", "Account,Bogus")
    assert bad.rc == 1
    assert 'Invalid field requested: "Bogus"' in bad.err and "TRESRunMins" in bad.err
    width = call(ShareClient(), "sshare", "-o", "User%x")
    assert width.rc == 1 and "e.g. User%20" in width.err
    empty = call(ShareClient(), "sshare", "-o", "")
    assert empty.rc == 1 and "-o Account,User" in empty.err
