"""The conformance suite every ``hal.cloud`` provider passes.

Plain functions that create, list and remove real instances through the ``Provider``
protocol and assert what the autoscaler relies on: each name gets one instance, listing
shows exactly this group's instances of this cluster (found again by a new provider, as
after a server restart), and removing is selective and idempotent. Providers may be
eventually consistent (EC2 is), so the checks poll ``instances()`` with ``wait_for``
rather than expecting a change at once.

Each check starts from an empty group (give each check a cluster name of its own) and
removes what it created, even when it fails. A provider's tests run them all, so a
check added here runs for every provider::

    @pytest.mark.parametrize("check", CHECKS)
    def test_conformance(check) -> None:
        check(MyProvider(group, "test-" + uuid4().hex[:8]), launch)

    @pytest.mark.parametrize("check", GROUP_CHECKS)
    def test_group_conformance(check) -> None:
        check(MyProvider, group, "test-" + uuid4().hex[:8], launch)

where ``group`` has at least three node names.

Some checks need what a stand-in of a cloud may lack: state across calls (Prism's mock
of a contract answers each call with the contract's example), a way to end an instance
behind the provider's back (an interruption or a loss), or a way to run out of capacity.
A provider's tests say what their stand-in has (``StandIn``), and skip with
``limit(check, stand_in)``'s reason the checks it cannot back::

    @pytest.mark.parametrize("check", CHECKS)
    def test_conformance(check) -> None:
        if (reason := limit(check, STAND_IN)) is not None:
            pytest.skip(reason)
        ...

``FAILURE_CHECKS`` take the stand-in itself: ``check(stand_in, launch)``.

Imports core and ``hal.cloud.provider`` only, so downstream providers can use it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from hal.cloud.provider import PENDING, RUNNING, Instance, Launch, Provider, ProviderError
from hal.core.node_groups import NodeGroup

ProviderFactory = Callable[[NodeGroup, str], Provider]
F = TypeVar("F", bound=Callable[..., None])

# what a check may need of a stand-in
STATE = "state"  # it remembers across calls: a launch is listed afterwards
LOSE = "lose"  # an instance can be ended behind the provider's back
FULL = "full"  # a provider of it can be made to run out of capacity


@dataclass(frozen=True, slots=True)
class StandIn:
    """What a provider's tests run it against, and what that can show.

    ``lose(instance)``: end an instance as an interruption or a failure would, without
    the provider (None: the stand-in cannot). ``full()``: a provider of an empty group
    that has no capacity (None: the stand-in never runs out). ``lacks``: for each
    need the stand-in cannot meet, why (the skip reason)."""

    name: str
    provider: Callable[[], Provider]  # a provider of an empty group
    lose: Callable[[Instance], None] | None = None
    full: Callable[[], Provider] | None = None
    lacks: tuple[tuple[str, str], ...] = ()

    def reason(self, need: str) -> str | None:
        for what, why in self.lacks:
            if what == need:
                return f"{self.name}: {why}"
        if need == LOSE and self.lose is None:
            return f"{self.name} cannot end an instance behind the provider's back"
        if need == FULL and self.full is None:
            return f"{self.name} never runs out of capacity"
        return None


def needs(*what: str) -> Callable[[F], F]:
    """Mark a check with what it needs of a stand-in (``STATE``, ``LOSE``, ``FULL``)."""

    def mark(check: F) -> F:
        check.needs = frozenset(what)  # type: ignore[attr-defined]
        return check

    return mark


def limit(check: Callable[..., Any], stand_in: StandIn) -> str | None:
    """Why ``stand_in`` cannot back ``check`` (the skip reason), or None."""
    for need in sorted(getattr(check, "needs", frozenset())):
        reason = stand_in.reason(need)
        if reason is not None:
            return reason
    return None


TIMEOUT = 120.0  # long enough for a real cloud's terminations
CLOCK_SLACK = 300.0  # a provider's clock may differ from ours this much


def wait_for(
    provider: Provider,
    predicate: Callable[[list[Instance]], bool],
    timeout: float = TIMEOUT,
    what: str = "the instances",
    interval: float = 0.2,
) -> list[Instance]:
    """Poll ``provider.instances()`` until ``predicate`` holds for the listing, and return
    that listing; fail with the last listing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        seen = provider.instances()
        if predicate(seen):
            return seen
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; saw {seen}")
        time.sleep(interval)


def check_create_nothing(provider: Provider, launch: Launch) -> None:
    """Creating no names starts nothing and is no error."""
    with _cleaned(provider):
        assert provider.create([], launch) == []
        assert provider.instances() == []


@needs(STATE)
def check_create_lists_and_removes(
    provider: Provider, launch: Launch, timeout: float = TIMEOUT
) -> None:
    """``create`` returns one fresh instance per name, ``instances`` lists them as
    created, and after ``remove`` they are gone."""
    names = _names(provider, 2)
    with _cleaned(provider):
        created = _create(provider, names, launch)
        ids = {i.id for i in created}
        listed = wait_for(provider, lambda seen: ids <= {i.id for i in seen}, timeout, "listing")
        by_id = {i.id: i for i in listed}
        for instance in created:
            assert by_id[instance.id].node == instance.node, by_id[instance.id]
            assert by_id[instance.id].group == provider.group.name, by_id[instance.id]
            assert by_id[instance.id].state in (PENDING, RUNNING), by_id[instance.id]
        provider.remove(created)
        wait_for(provider, lambda seen: not ids & {i.id for i in seen}, timeout, "removal")


@needs(STATE)
def check_each_name_once(provider: Provider, launch: Launch, timeout: float = TIMEOUT) -> None:
    """Three names give three instances with distinct ids, and the listing shows each
    name exactly once (no duplicate launches)."""
    names = _names(provider, 3)
    with _cleaned(provider):
        created = _create(provider, names, launch)
        ids = {i.id for i in created}
        listed = wait_for(provider, lambda seen: ids <= {i.id for i in seen}, timeout, "listing")
        assert Counter(i.node for i in listed) == Counter(names), listed
        assert len({i.id for i in listed}) == len(listed), listed


@needs(STATE)
def check_remove_only_given(provider: Provider, launch: Launch, timeout: float = TIMEOUT) -> None:
    """Removing one instance leaves the others running."""
    names = _names(provider, 2)
    with _cleaned(provider):
        gone, kept = _create(provider, names, launch)
        wait_for(provider, lambda seen: len(seen) == 2, timeout, "both listed")
        provider.remove([gone])
        seen = wait_for(provider, lambda seen: gone.id not in _ids(seen), timeout, "removal")
        assert [(i.id, i.node) for i in seen] == [(kept.id, kept.node)], seen
        assert seen[0].state in (PENDING, RUNNING), seen


@needs(STATE)
def check_remove_is_idempotent(
    provider: Provider, launch: Launch, timeout: float = TIMEOUT
) -> None:
    """Removing nothing, an instance being removed, or one long gone is no error."""
    names = _names(provider, 1)
    with _cleaned(provider):
        provider.remove([])
        created = _create(provider, names, launch)
        provider.remove(created)
        provider.remove(created)  # while it may still be stopping
        wait_for(provider, lambda seen: not _ids(seen) & _ids(created), timeout, "removal")
        provider.remove(created)  # gone by now
        assert provider.instances() == []


@needs(STATE)
def check_found_again(
    make: ProviderFactory, group: NodeGroup, cluster: str, launch: Launch, timeout: float = TIMEOUT
) -> None:
    """A new provider for the same group and cluster (a restarted server) lists the
    instances another created, and can remove them: the provider's records are the
    truth."""
    first = make(group, cluster)
    assert first.group == group
    with _cleaned(first):
        created = _create(first, _names(first, 2), launch)
        again = make(group, cluster)
        seen = wait_for(again, lambda seen: _ids(seen) == _ids(created), timeout, "listing")
        assert {(i.id, i.node) for i in seen} == {(i.id, i.node) for i in created}, seen
        again.remove(seen)
        wait_for(first, lambda seen: not seen, timeout, "removal through the new provider")


@needs(STATE)
def check_instances_are_this_groups_only(
    make: ProviderFactory, group: NodeGroup, cluster: str, launch: Launch, timeout: float = TIMEOUT
) -> None:
    """Instances of another group, or of the same group in another cluster, are neither
    listed nor removed: two clusters (or groups) can share one account or folder."""
    other_group = replace(
        group, name=f"{group.name}_other", nodes=tuple(f"{n}o" for n in group.nodes)
    )
    mine = make(group, cluster)
    providers = [mine, make(other_group, cluster), make(group, f"{cluster}-other")]
    with _cleaned(*providers):
        name = _names(mine, 1)
        created = [_create(p, _names(p, 1), launch)[0] for p in providers]
        for provider, instance in zip(providers, created, strict=True):
            seen = wait_for(provider, _listing(instance.id), timeout, f"{instance.id} listed")
            assert [(i.id, i.node, i.group) for i in seen] == [
                (instance.id, instance.node, provider.group.name)
            ], f"{provider.group.name}: {seen}"
        assert created[0].node == created[2].node == name[0]  # one name, two clusters
        mine.remove(mine.instances())
        wait_for(mine, lambda seen: not seen, timeout, "removal")
        for provider, instance in zip(providers[1:], created[1:], strict=True):
            assert _ids(provider.instances()) == {instance.id}, provider.group.name


@needs(STATE)
def check_create_retried(provider: Provider, launch: Launch, timeout: float = TIMEOUT) -> None:
    """A create retried with the same names, as after its answer was lost, gives back
    the instances the first made and starts none: each name has one instance."""
    names = _names(provider, 2)
    with _cleaned(provider):
        first = _create(provider, names, launch)
        wait_for(provider, lambda seen: _ids(first) <= _ids(seen), timeout, "listing")
        again = provider.create(names, launch)
        assert sorted((i.node, i.id) for i in again) == sorted((i.node, i.id) for i in first), again
        listed = provider.instances()
        assert Counter(i.node for i in listed) == Counter(names), listed


@needs(FULL)
def check_out_of_capacity(stand_in: StandIn, launch: Launch) -> None:
    """A provider without capacity refuses the whole create with an error flagged as
    capacity (the autoscaler then tries the next group), and starts nothing."""
    provider = _full(stand_in)
    with _cleaned(provider):
        try:
            made = provider.create(_names(provider, 2), launch)
        except ProviderError as err:
            assert err.capacity, f"not flagged as capacity: {err!r}"
            assert str(err), "a capacity error says what the provider said"
        else:
            raise AssertionError(f"{stand_in.name}: no capacity, yet created {made}")
        assert provider.instances() == []


@needs(STATE, LOSE)
def check_lost_instance(stand_in: StandIn, launch: Launch, timeout: float = TIMEOUT) -> None:
    """An instance ended without notice (interrupted, failed) is no longer listed, the
    others are, and removing it afterwards is no error."""
    assert stand_in.lose is not None
    provider = stand_in.provider()
    with _cleaned(provider):
        lost, kept = _create(provider, _names(provider, 2), launch)
        wait_for(provider, lambda seen: _ids(seen) == {lost.id, kept.id}, timeout, "listing")
        stand_in.lose(lost)
        seen = wait_for(provider, lambda seen: lost.id not in _ids(seen), timeout, "the loss")
        assert [(i.id, i.node) for i in seen] == [(kept.id, kept.node)], seen
        provider.remove([lost])


def _full(stand_in: StandIn) -> Provider:
    assert stand_in.full is not None, f"{stand_in.name} cannot run out of capacity"
    return stand_in.full()


def _names(provider: Provider, count: int) -> list[str]:
    nodes = provider.group.nodes
    assert len(nodes) >= count, f"the conformance suite needs a group of {count}+ nodes"
    return list(nodes[:count])


def _listing(instance_id: str) -> Callable[[list[Instance]], bool]:
    return lambda seen: instance_id in _ids(seen)


def _ids(instances: Sequence[Instance]) -> set[str]:
    return {i.id for i in instances}


def _create(provider: Provider, names: list[str], launch: Launch) -> list[Instance]:
    """``create``, checking what it returns: one instance per name, in this group, with
    a distinct id, starting, created about now. In the order of ``names``."""
    before = time.time()
    created = provider.create(names, launch)
    after = time.time()
    assert sorted(i.node for i in created) == sorted(names), created
    created.sort(key=lambda i: names.index(i.node))
    assert len(_ids(created)) == len(names) and all(i.id for i in created), created
    for instance in created:
        assert instance.group == provider.group.name, instance
        assert instance.state in (PENDING, RUNNING), instance
        assert before - CLOCK_SLACK <= instance.created_at <= after + CLOCK_SLACK, instance
    return created


@contextmanager
def _cleaned(*providers: Provider) -> Iterator[None]:
    """Require the providers' groups empty, and remove what is left on the way out."""
    for provider in providers:
        assert provider.instances() == [], f"start {provider.group.name} empty: {provider}"
    try:
        yield
    finally:
        for provider in providers:
            provider.remove(provider.instances())


# checks of one provider: check(provider, launch)
CHECKS: tuple[Callable[[Provider, Launch], None], ...] = (
    check_create_nothing,
    check_create_lists_and_removes,
    check_each_name_once,
    check_remove_only_given,
    check_remove_is_idempotent,
    check_create_retried,
)
# checks of several providers a factory makes: check(make, group, cluster, launch)
GROUP_CHECKS: tuple[Callable[[ProviderFactory, NodeGroup, str, Launch], None], ...] = (
    check_found_again,
    check_instances_are_this_groups_only,
)
# checks of what goes wrong: check(stand_in, launch)
FAILURE_CHECKS: tuple[Callable[[StandIn, Launch], None], ...] = (
    check_out_of_capacity,
    check_lost_instance,
)
