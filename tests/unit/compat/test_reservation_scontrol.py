"""scontrol create|show|update|delete reservation: Slurm's words in, Slurm's record out."""

from __future__ import annotations

from dataclasses import dataclass, field

from compat_fakes import T0, FakeClient, answered, call

from hal.core.errors import PermissionDenied
from hal.wire.reservations import (
    ReservationCreate,
    ReservationInfo,
    ReservationUpdate,
)

NOW = T0 + 100


@dataclass
class ResvClient(FakeClient):
    made: list[ReservationCreate] = field(default_factory=list)
    changed: list[tuple[str, ReservationUpdate]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    existing: list[ReservationInfo] = field(default_factory=list)
    refuse: bool = False

    def reservations(self, *, validate: bool = True) -> list[ReservationInfo]:
        return answered(self.existing, validate=validate)  # type: ignore[no-any-return]

    def create_reservation(self, body: ReservationCreate) -> ReservationInfo:
        if self.refuse:
            raise PermissionDenied(
                "user bob may not create reservations: only an administrator can"
            )
        self.made.append(body)
        return info(body.name)

    def update_reservation(self, name: str, body: ReservationUpdate) -> ReservationInfo:
        self.changed.append((name, body))
        return info(name)

    def delete_reservation(self, name: str) -> None:
        self.deleted.append(name)


def info(name: str = "maint", **kw: object) -> ReservationInfo:
    base: dict[str, object] = {
        "name": name,
        "start_time": T0 + 3600,
        "end_time": T0 + 3 * 3600,
        "duration_seconds": 7200,
        "nodes": ["node1", "node2"],
        "node_count": 2,
        "core_count": 8,
        "users": ["alice"],
        "flags": ["MAINT"],
        "state": "INACTIVE",
    }
    base.update(kw)
    return ReservationInfo.model_validate(base)


def test_create_reads_slurm_words() -> None:
    c = ResvClient()
    r = call(
        c, "scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+1hour",
        "Duration=2:00:00", "Nodes=node[1-2]", "Users=alice", "Accounts=physics,chem",
        "Flags=MAINT,DAILY", now=NOW,
    )  # fmt: skip
    assert r.rc == 0 and r.out.strip() == "Reservation created: maint"
    (body,) = c.made
    assert body.start_time == NOW + 3600 and body.duration_seconds == 7200
    assert body.nodes == ["node1", "node2"] and body.users == ["alice"]
    assert body.accounts == ["physics", "chem"] and body.flags == ["MAINT", "DAILY"]


def test_create_with_a_node_count_an_end_time_and_iso_times() -> None:
    c = ResvClient()
    r = call(
        c, "scontrol", "create", "res", "reservationname=x", "StartTime=2026-11-22T10:00:00",
        "EndTime=2026-11-22T12:30:00", "NodeCnt=3", "Users=bob", "PartitionName=gpu", now=NOW,
    )  # fmt: skip
    assert r.rc == 0, r.err
    (body,) = c.made
    assert body.node_count == 3 and body.nodes is None and body.partition == "gpu"
    assert body.end_time is not None and body.start_time is not None
    assert body.end_time - body.start_time == 2.5 * 3600


def test_bad_words_are_errors_that_say_what_to_do() -> None:
    c = ResvClient()
    cases = [
        (["ReservationName=x", "Licenses=foo"], "does not support reservation key Licenses"),
        (["ReservationName=x", "NodeCnt=two"], "NodeCnt needs a positive integer"),
        (["ReservationName=x", "Duration=0"], "Duration must be a positive time"),
        (["ReservationName=x", "garbage"], "write Key=Value"),
        (["ReservationName=x", "StartTime=yesterday-ish"], "invalid StartTime 'yesterday-ish'"),
        (["ReservationName=x", "EndTime=25:99"], "invalid EndTime '25:99'"),
        (["ReservationName=x", "Nodes=n[1-"], "invalid Nodes host list 'n[1-'"),
        (["ReservationName=x", "Users=-bob"], "does not support adding, removing or deny"),
        (["ReservationName=x", "Users=alice,-bob"], "give the whole list, e.g. Users=a,b"),
        (["ReservationName=x", "Accounts=+chem"], "give the whole list, e.g. Accounts=a,b"),
        (["ReservationName=x", "Users-=bob"], "'Users-=bob'"),
        (["ReservationName=x", "Flags+=MAINT"], "give the whole list, e.g. Flags=a,b"),
    ]
    for words, message in cases:
        r = call(c, "scontrol", "create", "reservation", *words, now=NOW)
        assert r.rc == 1 and r.err.startswith("scontrol: error: "), words
        assert message in r.err, (words, r.err)
    assert not c.made


def test_a_permission_error_reaches_the_user() -> None:
    c = ResvClient(refuse=True)
    r = call(c, "scontrol", "create", "reservation", "ReservationName=x", "Duration=60",
             "Nodes=node1", "Users=bob", now=NOW)  # fmt: skip
    assert r.rc == 1 and "only an administrator" in r.err


def test_show_prints_slurms_record() -> None:
    c = ResvClient(existing=[info(), info("other", flags=[], users=[], accounts=["physics"])])
    lines = call(c, "scontrol", "show", "reservation", now=NOW).lines
    assert lines[0].startswith("ReservationName=maint StartTime=20")
    assert lines[0].endswith(" Duration=02:00:00") and " EndTime=20" in lines[0]
    assert lines[1] == (
        "   Nodes=node[1-2] NodeCnt=2 CoreCnt=8 Features=(null) PartitionName=(null) Flags=MAINT"
    )
    assert lines[3] == (
        "   Users=alice Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE "
        "BurstBuffer=(null) Watts=n/a"
    )
    assert "   Users=(null) Groups=(null) Accounts=physics Licenses=(null) State=INACTIVE " \
        "BurstBuffer=(null) Watts=n/a" in lines  # fmt: skip
    one = call(c, "scontrol", "-o", "show", "res", "other", now=NOW).lines
    assert len(one) == 1 and one[0].startswith("ReservationName=other ")
    missing = call(c, "scontrol", "show", "reservation", "nope", now=NOW)
    assert missing.rc == 1 and missing.out.strip() == "Reservation nope not found"
    empty = call(ResvClient(), "scontrol", "show", "reservations", now=NOW)
    assert empty.out.strip() == "No reservations in the system"


def test_update_and_delete() -> None:
    c = ResvClient()
    r = call(c, "scontrol", "update", "ReservationName=maint", "Duration=3:00:00",
             "Users=alice,bob", now=NOW)  # fmt: skip
    assert r.rc == 0 and r.out.strip() == "Reservation updated."
    ((name, body),) = c.changed
    assert name == "maint" and body.duration_seconds == 3 * 3600
    assert body.users == ["alice", "bob"] and body.nodes is None
    assert body.model_dump(exclude_unset=True) == {
        "duration_seconds": 10800.0, "users": ["alice", "bob"],
    }  # fmt: skip
    # Slurm's remove form is refused, not read as a user named "-bob" replacing them all
    minus = call(c, "scontrol", "update", "ReservationName=maint", "Users=-bob", now=NOW)
    assert minus.rc == 1 and "give the whole list" in minus.err and len(c.changed) == 1
    nothing = call(c, "scontrol", "update", "ReservationName=maint", now=NOW)
    assert nothing.rc == 1 and "nothing to update" in nothing.err
    assert call(c, "scontrol", "delete", "ReservationName=maint", now=NOW).rc == 0
    assert c.deleted == ["maint"]
    bad = call(c, "scontrol", "delete", "JobId=3", now=NOW)
    assert bad.rc == 1 and "deletes reservations only" in bad.err


def test_sbatch_takes_the_reservation_from_options_directives_and_environment() -> None:
    c = ResvClient()
    assert call(c, "sbatch", "--reservation=maint", "--wrap=true", now=NOW).rc == 0
    script = "#!/bin/sh\n#SBATCH --reservation=lab\ntrue\n"
    assert call(c, "sbatch", stdin=script, now=NOW).rc == 0
    env = {"SBATCH_RESERVATION": "envres"}
    assert call(c, "sbatch", "--wrap=true", environ=env, now=NOW).rc == 0
    assert [j.reservation for j in c.submitted] == ["maint", "lab", "envres"]


def test_bad_duration_quotes_it_and_does_not_offer_unlimited() -> None:
    for value in ("1-x", "-1"):
        r = call(FakeClient(), "scontrol", "create", "reservation", "ReservationName=x",
                 f"Duration={value}", "Nodes=node1")  # fmt: skip
        assert r.rc == 1
        assert f"'{value}'" in r.err and "D-HH:MM:SS" in r.err
        assert "UNLIMITED for no limit" not in r.err
