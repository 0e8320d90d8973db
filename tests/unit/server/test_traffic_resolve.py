"""``EndpointIndex``: the far end of each reported connection resolved to the job that
owns it, by who listens where and by the reverse connection, across nodes that share
addresses (local agents on one machine all have 127.0.0.1 and the host's address)."""

from __future__ import annotations

from collections.abc import Sequence

from hal.server.traffic_resolve import AMBIGUOUS, EndpointIndex, Flow, Owner, ttl
from hal.wire.agent import Endpoint, JobFlow, JobTraffic

NOW = 1000.0


def ep(text: str) -> Endpoint:
    address, _, port = text.rpartition(":")
    return Endpoint(address=address.strip("[]"), port=int(port))


def report(
    job: int,
    listening: Sequence[str] = (),
    flows: Sequence[tuple[str, str, int]] = (),
) -> JobTraffic:
    return JobTraffic(
        job_id=job,
        attempt=0,
        interval_seconds=5.0,
        listening=[ep(e) for e in listening],
        flows=[
            JobFlow(local=ep(a), remote=ep(b), bytes_sent=n, bytes_received=0) for a, b, n in flows
        ],
    )


def learn(index: EndpointIndex, node: str, traffic: JobTraffic) -> list[Flow]:
    return index.learn(Owner(traffic.job_id, node), traffic, NOW)


def test_a_client_resolves_to_the_job_listening_on_its_remote_end() -> None:
    index = EndpointIndex()
    learn(index, "n1", report(1, listening=["10.0.0.1:5432"]))
    (flow,) = learn(index, "n2", report(2, flows=[("10.0.0.2:40000", "10.0.0.1:5432", 100)]))
    assert index.resolve(flow, NOW) == Owner(1, "n1")


def test_the_server_side_resolves_by_the_clients_reverse_connection() -> None:
    """The server's accepted socket has the client's ephemeral port as its remote: no job
    listens there, the client's own report of the connection names it."""
    index = EndpointIndex()
    learn(index, "n2", report(2, flows=[("10.0.0.2:40000", "10.0.0.1:5432", 100)]))
    (flow,) = learn(
        index,
        "n1",
        report(1, listening=["10.0.0.1:5432"], flows=[("10.0.0.1:5432", "10.0.0.2:40000", 7)]),
    )
    assert index.resolve(flow, NOW) == Owner(2, "n2")


def test_local_agents_sharing_127_0_0_1_resolve_by_address_and_port_across_nodes() -> None:
    """Three local agents on one machine: the service on n3, clients on n1 and n2 all
    connecting to 127.0.0.1:7000. One host cannot have two listeners there, so the one
    claim is the service, whichever node reports."""
    index = EndpointIndex()
    learn(index, "n3", report(3, listening=["127.0.0.1:7000"]))
    (f1,) = learn(index, "n1", report(1, flows=[("127.0.0.1:41000", "127.0.0.1:7000", 10)]))
    (f2,) = learn(index, "n2", report(2, flows=[("127.0.0.1:42000", "127.0.0.1:7000", 20)]))
    assert index.resolve(f1, NOW) == index.resolve(f2, NOW) == Owner(3, "n3")
    server = learn(
        index,
        "n3",
        report(3, flows=[("127.0.0.1:7000", "127.0.0.1:41000", 5),
                         ("127.0.0.1:7000", "127.0.0.1:42000", 6)]),
    )  # fmt: skip
    assert [index.resolve(f, NOW) for f in server] == [Owner(1, "n1"), Owner(2, "n2")]


def test_the_same_loopback_endpoint_on_two_hosts_resolves_to_the_reporters_own_node() -> None:
    """Two real hosts each run a job listening on 127.0.0.1:7000: a loopback connection
    stays on its host, so the claim on the reporter's own node wins."""
    index = EndpointIndex()
    learn(index, "h1", report(1, listening=["127.0.0.1:7000"]))
    learn(index, "h2", report(2, listening=["127.0.0.1:7000"]))
    (flow,) = learn(index, "h2", report(3, flows=[("127.0.0.1:41000", "127.0.0.1:7000", 10)]))
    assert index.resolve(flow, NOW) == Owner(2, "h2")


def test_two_claims_elsewhere_are_ambiguous_and_make_no_edge() -> None:
    index = EndpointIndex()
    learn(index, "h1", report(1, listening=["127.0.0.1:7000"]))
    learn(index, "h2", report(2, listening=["127.0.0.1:7000"]))
    (flow,) = learn(index, "h3", report(3, flows=[("127.0.0.1:41000", "127.0.0.1:7000", 10)]))
    assert index.resolve(flow, NOW) is AMBIGUOUS


def test_a_wildcard_listener_claims_its_nodes_addresses_and_loopback() -> None:
    """A job on 0.0.0.0:8080 is reached at any address of its node: those its node's jobs
    were seen using, and loopback."""
    index = EndpointIndex()
    learn(index, "n1", report(1, listening=["0.0.0.0:8080"]))
    learn(index, "n1", report(5, flows=[("10.0.0.1:50000", "10.0.0.9:443", 1)]))  # n1 is .1
    (by_address,) = learn(index, "n2", report(2, flows=[("10.0.0.2:1", "10.0.0.1:8080", 1)]))
    (by_loopback,) = learn(index, "n1", report(3, flows=[("127.0.0.1:2", "127.0.0.1:8080", 1)]))
    (elsewhere,) = learn(index, "n2", report(4, flows=[("10.0.0.2:3", "10.0.0.7:8080", 1)]))
    assert index.resolve(by_address, NOW) == Owner(1, "n1")
    assert index.resolve(by_loopback, NOW) == Owner(1, "n1")
    assert index.resolve(elsewhere, NOW) is None


def test_ipv4_mapped_addresses_are_their_ipv4_ones() -> None:
    index = EndpointIndex()
    learn(index, "n1", report(1, listening=["10.0.0.1:5432"]))
    (flow,) = learn(
        index, "n2", report(2, flows=[("[::ffff:10.0.0.2]:1", "[::ffff:10.0.0.1]:5432", 1)])
    )
    assert index.resolve(flow, NOW) == Owner(1, "n1")


def test_a_flow_waits_for_its_peers_first_report_then_resolves() -> None:
    """The client reported before the service's agent did: its connection waits for a
    claim on its far end instead of being lost."""
    index = EndpointIndex()
    (flow,) = learn(index, "n2", report(2, flows=[("10.0.0.2:40000", "10.0.0.1:5432", 100)]))
    assert index.resolve(flow, NOW) is None
    index.wait(flow)
    assert index.pending == 1
    learn(index, "n1", report(1, listening=["10.0.0.1:5432"]))
    (again,) = index.waiting_for([("10.0.0.1", 5432)])
    assert index.pending == 0 and index.resolve(again, NOW) == Owner(1, "n1")


def test_waiting_flows_and_entries_expire_and_ended_jobs_leave_the_index() -> None:
    index = EndpointIndex()
    learn(index, "n1", report(1, listening=["10.0.0.1:5432"]))
    (flow,) = learn(index, "n2", report(2, flows=[("10.0.0.2:40000", "10.0.0.9:80", 100)]))
    index.wait(flow)
    index.expire(NOW + 1, active={2})  # job 1 ended
    assert (
        index.resolve(
            Flow(Owner(3, "n3"), ("10.0.0.3", 1), ("10.0.0.1", 5432), 1, 5.0, NOW + 1), NOW + 1
        )
        is None
    )
    assert index.pending == 1
    index.expire(NOW + ttl(5.0) + 1, active={2})
    assert index.pending == 0 and index.unresolved == 1 and index.entries == 0


def test_an_entry_past_its_time_claims_nothing_before_the_sweep() -> None:
    index = EndpointIndex()
    learn(index, "n1", report(1, listening=["10.0.0.1:5432"]))
    late = NOW + ttl(5.0) + 1
    flow = Flow(Owner(2, "n2"), ("10.0.0.2", 1), ("10.0.0.1", 5432), 1, 5.0, late)
    assert index.resolve(flow, late) is None
