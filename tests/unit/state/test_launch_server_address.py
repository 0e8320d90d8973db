"""The server's part of a job's ``HAL_URL``: its own address where the submitter
exported none, marked so the agent may list every server instead
(``Launch.hal_url_default``); the submitter's exported value is left alone."""

from __future__ import annotations

from hal.state.agents import feedback_environment
from hal.state.cluster import Cluster
from hal.testing.builders import make_job


def test_the_servers_address_is_put_and_marked_only_where_none_was_exported(
    cluster: Cluster,
) -> None:
    cluster.url = "https://head1:8470"
    job = make_job(3).running_on("n1").build()
    env: dict[str, str] = {}
    assert feedback_environment(cluster, job, env)
    assert env["HAL_URL"] == "https://head1:8470"
    exported = {"HAL_URL": "https://head1:8470,https://head2:8470"}
    assert not feedback_environment(cluster, job, exported)
    assert exported["HAL_URL"] == "https://head1:8470,https://head2:8470"
    empty = {"HAL_URL": ""}  # `export HAL_URL=`: the clients' default, as unset
    assert feedback_environment(cluster, job, empty)
    assert empty["HAL_URL"] == "https://head1:8470"
    cluster.url = ""  # (an app without its HTTP edge: no address to give)
    none: dict[str, str] = {}
    assert not feedback_environment(cluster, job, none)
    assert "HAL_URL" not in none
