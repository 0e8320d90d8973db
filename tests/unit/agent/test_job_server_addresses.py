"""A job's ``HAL_URL`` where its submitter exported none: every server address its agent
was given, the leader first (docs/admin/failover.md), so ``hal feedback``, ``srun`` and
``sbatch`` inside the job follow a takeover as the agent does."""

from __future__ import annotations

from hal.agent.environment import job_environment, with_server_addresses
from hal.testing.builders import make_launch
from hal.wire.agent import Launch

A, B, C = "http://a:8470", "http://b:8470", "http://c:8470"


def launch(environment: dict[str, str], *, default: bool) -> Launch:
    return make_launch(
        7, user="ana", workdir="/home/ana", environment=environment, hal_url_default=default
    )


def test_the_servers_own_address_becomes_the_agents_list_leader_first() -> None:
    """The leader (B, the one the agent reached last) sent the launch with its own
    advertised address; the job gets B, then the agent's others in their order."""
    got = with_server_addresses(launch({"HAL_URL": B}, default=True), [B, A, C])
    assert got.environment["HAL_URL"] == f"{B},{A},{C}"
    assert not got.hal_url_default  # (done once: a second pass changes nothing)
    assert with_server_addresses(got, [C, A, B]) is got
    assert job_environment(got, "n1")["HAL_URL"] == f"{B},{A},{C}"


def test_an_advertised_address_the_agent_knows_by_another_name_comes_last() -> None:
    """The agent reaches the servers by IP; the leader advertises its host name: the job
    keeps that too, after the addresses this node is known to reach."""
    ips = ["http://10.0.0.2:8470", "http://10.0.0.1:8470"]
    got = with_server_addresses(launch({"HAL_URL": "https://head2:8470/"}, default=True), ips)
    assert got.environment["HAL_URL"] == f"{ips[0]},{ips[1]},https://head2:8470"


def test_the_submitters_address_is_kept() -> None:
    """An exported HAL_URL is the submitter's choice (Slurm exports the environment):
    whatever it lists, the job has it as it was."""
    given = launch({"HAL_URL": A}, default=False)
    assert with_server_addresses(given, [B, A]) is given


def test_an_agent_of_one_address_leaves_the_servers_own() -> None:
    """Nothing to follow: a site of one server keeps one address in its jobs, even where
    the agent names the server otherwise than the server names itself."""
    given = launch({"HAL_URL": "http://head:8470"}, default=True)
    assert with_server_addresses(given, ["http://127.0.0.1:8470"]) is given
    assert with_server_addresses(given, []) is given


def test_a_launch_from_a_server_before_the_mark_keeps_its_one_address() -> None:
    """A server before the mark sends none: read as False, the one address stays. (An
    agent before it ignores the field: wire models allow extra fields.)"""
    old = Launch.model_validate_json(
        launch({"HAL_URL": A}, default=False).model_dump_json(exclude={"hal_url_default"})
    )
    assert with_server_addresses(old, [B, A]).environment["HAL_URL"] == A
