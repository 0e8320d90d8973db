"""What an admin runs on nodes, as Slurm 22.05.8 answers it (checked on the peer:
docs/slurm-checks.md, "Node administration"): sinfo's counts and ``-t`` of
drained and draining nodes, ``sinfo -T``, ``scontrol show node HOSTLIST``, ``update
NodeName=``/``Node=`` and ``scontrol ping``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from compat_fakes import FakeClient, answered, call, node, partition

from hal.core.errors import Unavailable
from hal.wire.nodes import NodeInfo, UserInfo
from hal.wire.reservations import ReservationInfo

T0 = 1_790_000_000.0


def draining() -> FakeClient:
    """``localhost`` (4 CPUs) running a 1-CPU job, then drained: MIXED+DRAIN."""
    return FakeClient(
        node_list=[
            node("localhost", state="DRAIN", display_state="drng", cpus=4, cpus_alloc=1),
            node("n1"),
            node("n2"),
        ],
        partition_list=[partition("debug", default=True)],
    )


def test_a_draining_node_counts_as_allocated() -> None:
    """Slurm: ``debug* drng localhost 1/0 1/0/0/1 1/0/3/4`` and ``sinfo -s`` 1/2/0/3; HAL
    counted the node and its CPUs as other (0/0, 0/0/1/1, 0/0/4/4)."""
    client = draining()
    fmt = "%P %t %N %A %F %C"
    assert call(client, "sinfo", "-h", "-n", "localhost", "-o", fmt).lines == [
        "debug* drng localhost 1/0 1/0/0/1 1/0/3/4"
    ]
    assert call(client, "sinfo", "-h", "-s", "-o", "%F").lines == ["1/2/0/3"]
    cpus = call(client, "sinfo", "-h", "-n", "localhost", "-O", "CPUsState,NodeAIOT,NodeAI")
    assert cpus.lines == ["1/0/3/4             1/0/0/1             1/0                 "]


def states_cluster() -> FakeClient:
    """One node of each state the peer showed, on 2-CPU nodes."""
    return FakeClient(
        node_list=[
            node("idle"),
            node("mixed", display_state="mix", cpus_alloc=1),
            node("full", display_state="alloc", cpus_alloc=2),
            node("drained", state="DRAIN", display_state="drain", reason="x"),
            node("draining", state="DRAIN", display_state="drng", cpus_alloc=1, reason="x"),
            node("down", state="DOWN", display_state="down", reason="x"),
            node("downdrain", state="DOWN", display_state="down", state_flags=["DRAIN"]),
            node("maint", state_flags=["MAINTENANCE", "RESERVED"]),
        ],
        partition_list=[partition("debug", default=True)],
    )


@pytest.mark.parametrize(
    ("states", "shown"),
    [
        ("idle", ["drained", "idle", "maint"]),
        ("mix", ["mixed"]),
        ("mixed", ["mixed"]),
        ("alloc", ["draining", "full", "mixed"]),
        ("allocated", ["draining", "full", "mixed"]),
        ("drain", ["downdrain", "drained", "draining"]),
        ("drained", ["downdrain", "drained"]),
        ("draining", ["draining"]),
        ("drng", ["draining"]),
        ("down", ["down", "downdrain"]),
        ("resv", ["maint"]),
        ("maint", ["maint"]),
    ],
)
def test_state_filters_match_base_states_and_the_drain_flag(states: str, shown: list[str]) -> None:
    """``sinfo -t`` as Slurm 22.05.8 matched them on the peer: a drained idle node is
    idle (HAL left it out), a draining one allocated but not mixed, a down drained one
    down, drain and drained; a maintenance node is reserved too."""
    result = call(states_cluster(), "sinfo", "-h", "-N", "-t", states, "-o", "%N")
    assert (result.rc, result.lines) == (0, shown)


def test_a_down_drained_node_shows_drained() -> None:
    """``State=DOWN+DRAIN``, sinfo ``drain``/``drained`` (HAL showed DOWN and down)."""
    client = states_cluster()
    lines = call(client, "sinfo", "-h", "-N", "-n", "downdrain", "-o", "%t %T").lines
    assert lines == ["drain drained"]
    assert "State=DOWN+DRAIN " in call(client, "scontrol", "show", "node", "downdrain").out
    maint = call(client, "scontrol", "show", "node", "maint").out
    assert "State=IDLE+MAINTENANCE+RESERVED " in maint


def test_show_node_takes_host_lists() -> None:
    """``show node n[1-2]`` and ``n1,n2`` print both (HAL refused them); a name no node
    has is Slurm's ``Node NAME not found`` on stdout, exit code 1."""
    client = draining()
    for words in (["node", "n[1-2]"], ["node", "n1,n2"], ["nodes=n1,n2"]):
        result = call(client, "scontrol", "show", *words)
        assert result.rc == 0, result.err
        names = [line for line in result.lines if line.startswith("NodeName=")]
        assert names == ["NodeName=n1 CoresPerSocket=1", "NodeName=n2 CoresPerSocket=1"]
    missing = call(client, "scontrol", "show", "node", "nosuch")
    assert (missing.rc, missing.out, missing.err) == (1, "Node nosuch not found\n", "")
    some = call(client, "scontrol", "-o", "show", "node", "n1,zz")
    assert some.rc == 1
    assert some.lines[0].startswith("NodeName=n1 ")
    assert some.lines[1:] == ["Node zz not found"]


def test_resume_of_a_node_not_drained_is_refused_the_others_resumed() -> None:
    """Slurm: ``slurm_update error: Invalid node state specified``, rc 1, the drained
    nodes named resumed all the same (HAL said nothing, rc 0)."""
    client = states_cluster()
    alone = call(client, "scontrol", "update", "NodeName=idle", "State=RESUME")
    assert (alone.rc, alone.err) == (1, "slurm_update error: Invalid node state specified\n")
    words = ("update", "NodeName=idle,drained,downdrain", "State=resume")
    listed = call(client, "scontrol", *words)
    assert (listed.rc, listed.err) == (1, "slurm_update error: Invalid node state specified\n")
    assert client.node_updates == [("drained", "RESUME", ""), ("downdrain", "RESUME", "")]
    undrain = call(client, "scontrol", "update", "NodeName=idle", "State=UNDRAIN")
    assert (undrain.rc, undrain.err) == (0, "")


def test_node_is_short_for_nodename() -> None:
    """``update node=n1 state=drain reason=x`` drains n1, as Slurm's (HAL took it as a
    job update)."""
    client = states_cluster()
    result = call(client, "scontrol", "update", "node=idle", "state=drain", "reason=x")
    assert (result.rc, result.err) == (0, "")
    assert client.node_updates == [("idle", "DRAIN", "x")]


def test_a_reason_alone_rewords_a_drained_or_down_node() -> None:
    """``update NodeName=X Reason=new``: a drained, draining or down node keeps its state
    with the new reason; an idle node is left as it is, rc 0 (HAL refused: "give the new
    state")."""
    client = states_cluster()
    words = ("update", "NodeName=drained,draining,down,downdrain,idle", "Reason=new")
    result = call(client, "scontrol", *words)
    assert (result.rc, result.err) == (0, "")
    assert client.node_updates == [
        ("drained", "DRAIN", "new"),
        ("draining", "DRAIN", "new"),
        ("down", "DOWN", "new"),
        ("downdrain", "DOWN", "new"),
    ]


def test_a_non_administrators_update_is_slurms_invalid_user() -> None:
    from hal.core.errors import PermissionDenied

    @dataclass
    class NotAdmin(FakeClient):
        def update_node(self, name: str, state: str, reason: str = "") -> NodeInfo:
            raise PermissionDenied("user nobody is not an administrator")

    client = NotAdmin(node_list=[node("n1")], partition_list=[partition("debug")])
    result = call(client, "scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=x")
    assert (result.rc, result.err) == (1, "slurm_update error: Invalid user id\n")


@dataclass
class Unreachable(FakeClient):
    def whoami(self, *, validate: bool = True) -> UserInfo:
        raise Unavailable("cannot reach the HAL server at http://127.0.0.1:8470")


def test_ping() -> None:
    """``Slurmctld(primary) at HOST is UP``, rc 0; stopped, Slurm's DOWN lines on stdout
    and rc 1 (HAL had no ``ping``)."""
    environ = {"HAL_URL": "http://ctl.example:8470"}
    up = call(FakeClient(), "scontrol", "ping", environ=environ)
    assert (up.rc, up.out, up.err) == (0, "Slurmctld(primary) at ctl.example is UP\n", "")
    down = call(Unreachable(), "scontrol", "ping", environ=environ)
    assert (down.rc, down.err) == (1, "")
    assert down.lines == [
        "Slurmctld(primary) at ctl.example is DOWN",
        "*****************************************",
        "** RESTORE SLURMCTLD DAEMON TO SERVICE **",
        "*****************************************",
    ]
    several = {"HAL_URL": "http://ctl.example:8470,http://ctl2.example:8470"}
    up = call(FakeClient(), "scontrol", "ping", environ=several)
    assert up.out == "Slurmctld(primary) at ctl.example is UP\n"


@dataclass
class WithReservations(FakeClient):
    reservation_list: list[ReservationInfo] = field(default_factory=list)

    def reservations(self, *, validate: bool = True) -> list[ReservationInfo]:
        return answered(self.reservation_list, validate=validate)  # type: ignore[no-any-return]


def _reservation(
    name: str, start: float, seconds: float, nodes: list[str], state: str
) -> ReservationInfo:
    return ReservationInfo(
        name=name,
        start_time=start,
        end_time=start + seconds,
        duration_seconds=seconds,
        nodes=nodes,
        node_count=len(nodes),
        core_count=0,
        state=state,
    )


def test_sinfo_lists_reservations() -> None:
    """``sinfo -T`` (``--reservation``) as the peer printed it: the name column as wide
    as the longest name, the other options ignored (HAL refused ``-T``)."""
    from hal.compat.formats import timestamp

    client = WithReservations(
        reservation_list=[
            _reservation("mm", T0, 3600, ["localhost"], "ACTIVE"),
            _reservation("later", T0 + 3600, 1800, ["n1"], "INACTIVE"),
            _reservation("rr", T0, 365 * 86400, ["n2"], "ACTIVE"),
        ]
    )
    s, e = timestamp(T0), timestamp(T0 + 3600)
    assert call(client, "sinfo", "-T").lines == [
        "RESV_NAME     STATE           START_TIME             END_TIME     DURATION  NODELIST",
        f"mm           ACTIVE  {s}  {e}     01:00:00  localhost",
        f"later      INACTIVE  {e}  {timestamp(T0 + 5400)}     00:30:00  n1",
        f"rr           ACTIVE  {s}  {timestamp(T0 + 365 * 86400)}  365-00:00:00  n2",
    ]
    client.reservation_list.append(_reservation("abcdefghij", T0, 93840, ["n1", "n2"], "ACTIVE"))
    lines = call(client, "sinfo", "--reservation", "-h", "-o", "%N", "-p", "x").lines
    assert lines[0] == f"mm            ACTIVE  {s}  {e}     01:00:00  localhost"
    assert lines[-1].endswith("   1-02:04:00  n[1-2]")
    assert len(lines) == 4
    none = call(WithReservations(), "sinfo", "-T")
    assert (none.rc, none.lines) == (0, ["No reservations in the system"])
