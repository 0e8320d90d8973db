"""Reservation words and error lines as Slurm 22.05.8 has them, found missing by an
admin's side-by-side run (docs/slurm-checks.md)."""

from __future__ import annotations

from dataclasses import dataclass

from compat_fakes import FakeClient, call, job
from test_reservation_scontrol import NOW, ResvClient, info

from hal.core.errors import Conflict, NotFound
from hal.wire.reservations import ReservationCreate, ReservationUpdate


@dataclass
class RefusingClient(ResvClient):
    error: Exception | None = None

    def create_reservation(self, body: ReservationCreate) -> None:  # type: ignore[override]
        assert self.error is not None
        raise self.error

    def update_reservation(self, name: str, body: ReservationUpdate) -> None:  # type: ignore[override]
        assert self.error is not None
        raise self.error

    def delete_reservation(self, name: str) -> None:
        assert self.error is not None
        raise self.error


def test_nodes_all_unlimited_duration_no_name_and_purge_time() -> None:
    c = ResvClient()
    r = call(
        c, "scontrol", "create", "reservation", "nodes=ALL", "duration=UNLIMITED", "users=root",
        "flags=maint,PURGE_COMP=00:05:00", now=NOW,
    )  # fmt: skip
    assert r.rc == 0, r.err
    (body,) = c.made
    assert body.name == "" and body.nodes == ["ALL"]
    assert body.duration_seconds == 365 * 86_400  # Slurm: Duration=365-00:00:00
    assert body.flags == ["maint", "PURGE_COMP=300"]
    inf = call(c, "scontrol", "create", "res", "duration=infinite", "nodes=n1", "users=a", now=NOW)
    assert inf.rc == 0 and c.made[-1].duration_seconds == 365 * 86_400


def test_show_prints_flags_in_slurms_order_and_purge_as_a_time() -> None:
    flags = ["MAINT", "IGNORE_JOBS", "SPEC_NODES", "PURGE_COMP=300"]
    c = ResvClient(existing=[info(flags=flags)])
    lines = call(c, "scontrol", "show", "reservation", now=NOW).lines
    assert lines[1].endswith(" Flags=MAINT,IGNORE_JOBS,SPEC_NODES,PURGE_COMP=00:05:00")
    assert lines[3].endswith(" BurstBuffer=(null) Watts=n/a")


def test_delete_and_update_refusals_in_slurms_words() -> None:
    unknown = RefusingClient(error=NotFound("Reservation nosuch not found"))
    r = call(unknown, "scontrol", "delete", "reservationname=nosuch")
    assert (r.rc, r.out) == (1, "")
    assert r.err == "delete_reservation reservationname=nosuch: Requested reservation is invalid\n"
    r = call(unknown, "scontrol", "update", "reservationname=nosuch", "duration=10")
    assert r.rc == 1 and r.err == (
        "Error updating the reservation: Requested reservation is invalid\n"
        "slurm_update error: Requested reservation is invalid\n"
    )
    used = RefusingClient(error=Conflict("Requested reservation is in use: job 1 ..."))
    r = call(used, "scontrol", "delete", "Reservation=p1")  # (Slurm takes this key too)
    assert r.rc == 1
    assert (
        r.err == "delete_reservation Reservation=p1: Requested reservation is in use: job 1 ...\n"
    )


def test_busy_nodes_refusal_prints_slurms_notes() -> None:
    busy = RefusingClient(error=Conflict("Requested nodes are busy: node n1 runs job 4, ..."))
    r = call(busy, "scontrol", "create", "res", "reservationname=b", "duration=30",
             "nodes=n1", "users=root", now=NOW)  # fmt: skip
    assert r.rc == 1
    assert (
        r.err
        == "Error creating the reservation: Requested nodes are busy: node n1 runs job 4, ...\n"
    )
    assert r.out.splitlines() == [
        "Note, unless nodes are directly requested a reservation must exist in a single partition.",
        "If no partition is requested the default partition is assumed.",
    ]


def test_squeue_reservation_filter() -> None:
    c = FakeClient(job_list=[job(1, reservation="maint"), job(2), job(3, reservation="other")])
    for argv in (["--reservation=maint"], ["-R", "maint"], ["-R", "maint,nosuch"]):
        r = call(c, "squeue", "-h", "-o", "%i %v", *argv)
        assert r.rc == 0 and r.out.split() == ["1", "maint"], argv
    assert call(c, "squeue", "-h", "-R", "nosuch").out == ""
