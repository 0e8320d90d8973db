"""Choosing an isolation backend."""

from __future__ import annotations

import pytest

from hal.agent.isolation import Isolation, agent_cgroup_name, detect_isolation
from hal.core.errors import InvalidRequest


def test_unknown_choice_names_the_field() -> None:
    with pytest.raises(InvalidRequest) as err:
        detect_isolation("docker", "n1")
    assert err.value.field == "isolation"


@pytest.mark.parametrize("choice", ["rlimit", "none"])
def test_explicit_non_cgroup_choices_need_nothing_from_the_host(choice: str) -> None:
    assert detect_isolation(choice, "n1") == Isolation(choice)


def test_only_rlimit_needs_the_watchdog() -> None:
    assert Isolation("rlimit").watchdog
    assert not Isolation("cgroup1", "/x").watchdog
    assert not Isolation("none").watchdog


def test_without_cgroups_nothing_is_created() -> None:
    assert Isolation("rlimit").create_group(1, 0, 1 << 20) == ""
    assert not Isolation("none").collect("", killed_by_sigkill=True).oom


def test_each_agent_has_its_own_cgroup_folder() -> None:
    """Two agents on one host (test clusters, virtual nodes) must not share job cgroups,
    even with the same node name."""
    a = agent_cgroup_name("node1", "/var/lib/hal/a")
    assert a == agent_cgroup_name("node1", "/var/lib/hal/a")
    assert a.startswith("node1.")
    assert a != agent_cgroup_name("node1", "/var/lib/hal/b")


def test_the_cpu_fence_needs_a_cgroup_backend() -> None:
    """``--constrain-cores yes`` on an agent without cgroups is refused, naming the
    option; ``auto`` there fences nothing; an unknown value is refused."""
    with pytest.raises(InvalidRequest) as err:
        detect_isolation("rlimit", "n1", cores="yes")
    assert err.value.field == "constrain_cores" and "cpuset" in err.value.message
    assert detect_isolation("rlimit", "n1", cores="auto").cores == ""
    with pytest.raises(InvalidRequest) as unknown:
        detect_isolation("rlimit", "n1", cores="always")
    assert unknown.value.field == "constrain_cores"
