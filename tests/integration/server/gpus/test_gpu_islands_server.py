"""NVLink islands end to end: a real server and real ``hal agent``s declaring 8 fake
GPUs in two islands (``--gpus 8 --gpu-islands 0-3,4-7``). Jobs print the
``CUDA_VISIBLE_DEVICES`` the agent gave them: it follows the allocation, one island per
job while one fits, best fit among islands, on a node that has one free."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

pytestmark = pytest.mark.slow


@contextmanager
def _gpu_server(tmp: Path, names: tuple[str, ...]) -> Iterator[LiveServer]:
    with LiveServer(tmp) as srv:
        for name in names:
            srv.start_agent(name, cpus=8, extra=["--gpus", "8", "--gpu-islands", "0-3,4-7"])
        with srv.client() as c:
            wait_until(
                lambda: sum(n.name in names and n.state == "UP" for n in c.nodes()) == len(names),
                message="the GPU agents to register",
            )
        try:
            yield srv
        finally:
            srv.stop_agents()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with _gpu_server(tmp_path_factory.mktemp("islands"), ("gpu1",)) as srv:
        yield srv


class Jobs:
    """Jobs that write the CUDA_VISIBLE_DEVICES they see, then stay until ``release``d
    (or ``done``), so that the GPUs they hold shape where the next ones land."""

    def __init__(self, srv: LiveServer, tmp: Path) -> None:
        self.srv, self.tmp, self.ids = srv, tmp, []

    def submit(
        self, name: str, gpus: int, topology: str | None = None, node: str | None = None
    ) -> int:
        out, hold = self.tmp / name, self.tmp / f"hold-{name}"
        hold.touch()
        script = (
            f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES" > {out}\n'
            f"while [ -e {hold} ]; do sleep 0.1; done\n"
        )
        job = JobSubmit(
            script=script,
            workdir=str(self.tmp),
            gpus_per_node=gpus,
            topology=topology,
            nodelist=[node] if node else [],
        )
        with self.srv.client() as c:
            jid = c.submit(job).job_id
        self.ids.append(jid)
        return jid

    def seen(self, name: str) -> list[int]:
        out = self.tmp / name
        wait_until(lambda: out.exists() and out.read_text().strip() != "", message=name)
        return [int(g) for g in out.read_text().split(",")]

    def run(self, name: str, gpus: int, node: str | None = None) -> list[int]:
        self.submit(name, gpus, node=node)
        return self.seen(name)

    def release(self, name: str) -> None:
        (self.tmp / f"hold-{name}").unlink()

    def done(self) -> None:
        for hold in self.tmp.glob("hold-*"):
            hold.unlink()
        with self.srv.client() as c:
            for jid in self.ids:
                c.cancel(jid)
            wait_until(
                lambda: all(c.job(j).state not in ("PENDING", "RUNNING") for j in self.ids),
                message="the test's jobs to end",
            )
            wait_until(
                lambda: all(n.gpus_alloc == 0 for n in c.nodes()), message="the GPUs to be free"
            )


@pytest.fixture
def jobs(server: LiveServer, tmp_path: Path) -> Iterator[Jobs]:
    j = Jobs(server, tmp_path)
    try:
        yield j
    finally:
        j.done()


def test_node_reports_its_islands(server: LiveServer) -> None:
    with server.client() as c:
        node = next(n for n in c.nodes() if n.name == "gpu1")
    assert (node.gpus, node.gpu_islands) == (8, [[0, 1, 2, 3], [4, 5, 6, 7]])


def test_cuda_visible_devices_follow_best_fit_islands(jobs: Jobs) -> None:
    assert jobs.run("a", 2) == [0, 1]
    assert jobs.run("b", 4) == [4, 5, 6, 7]  # A has 2 free, B 4: B is the only fit
    assert jobs.run("c", 2) == [2, 3]  # A's last two (best fit), not a split


def test_required_nvlink_waits_instead_of_splitting(server: LiveServer, jobs: Jobs) -> None:
    assert jobs.run("a", 2) == [0, 1]
    assert jobs.run("b", 3) == [4, 5, 6]
    # free now: 2, 3 (island A) and 7 (B): three GPUs, but no island holds three
    bound = jobs.submit("c", 3, topology="required=nvlink")
    with server.client() as c:
        wait_until(lambda: c.job(bound).reason == "Resources", message="c to wait")
        assert c.job(bound).state == "PENDING"
    assert not (jobs.tmp / "c").exists()
    jobs.release("b")  # island B is free again: c gets three GPUs of it
    assert jobs.seen("c") == [4, 5, 6]


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[Jobs]:
    with _gpu_server(tmp_path / "server", ("gpua", "gpub")) as srv:
        j = Jobs(srv, tmp_path)
        try:
            yield j
        finally:
            j.done()


def test_a_gpu_job_goes_to_the_node_with_a_whole_island_free(two_nodes: Jobs) -> None:
    """gpua holds two jobs that leave GPUs 2, 3 and 7 free (three, over two islands);
    gpub is empty. Best fit alone would pick the fuller gpua and split a 3-GPU job;
    it runs on gpub inside one island instead."""
    assert two_nodes.run("a", 2, node="gpua") == [0, 1]
    assert two_nodes.run("b", 3, node="gpua") == [4, 5, 6]
    jid = two_nodes.submit("c", 3)
    assert two_nodes.seen("c") == [0, 1, 2]
    with two_nodes.srv.client() as c:
        assert c.job(jid).nodes == ["gpub"]
