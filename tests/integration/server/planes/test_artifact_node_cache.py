"""``[artifacts] node_cache`` on a real server and agent (docs/user/artifacts.md): the
server's bound reaches the agent at registration over its own ``--artifact-cache``, and
past it the least recently used copies go, never one a running job uses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.artifacts import LEAST_CACHE, ArtifactsConfig
from hal.testing.live import LiveServer, wait_until

PIECE = 700 * 1024  # two copies are over the bound, one is not


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = ArtifactsConfig(node_cache_bytes=LEAST_CACHE)
    tmp = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(tmp, config_overrides={"artifacts": settings}) as live,
        live.agents(1, extra=["--artifact-cache", "10G"]),
    ):
        yield live


def _publish(live: LiveServer, folder: Path, name: str) -> str:
    program = folder / name
    program.write_bytes(b"#!/bin/sh\ntrue\n#" + os.urandom(PIECE))
    with live.client() as c:
        return c.push_artifact(name, "1", program)[0].sha256


def _submit(live: LiveServer, folder: Path, artifact: str, script: str) -> str:
    (folder / f"{artifact}.sh").write_text(f"#!/bin/sh\n{script}\n")
    done = live.cli("sbatch", "--parsable", f"--artifact={artifact}@1", "-o", "/dev/null",
                    f"{artifact}.sh", cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _state(live: LiveServer, job_id: str) -> str:
    with live.client() as c:
        return c.job(job_id).state


def _ends(live: LiveServer, job_id: str) -> None:
    wait_until(lambda: _state(live, job_id) not in ("PENDING", "RUNNING"), 60, message="end")
    assert _state(live, job_id) == "COMPLETED"


def test_a_running_jobs_copy_stays_and_the_bound_is_the_servers(
    server: LiveServer, tmp_path: Path
) -> None:
    a, b, c = (_publish(server, tmp_path, n) for n in ("a", "b", "c"))
    root = server.data_dir / "agents" / "node1" / "artifacts"

    def here() -> set[str]:
        return {p.name.removesuffix(".program") for p in root.glob("*.program")}

    stop = tmp_path / "stop"
    long = _submit(server, tmp_path, "a", f"while [ ! -e {stop} ]; do sleep 0.1; done")
    wait_until(lambda: _state(server, long) == "RUNNING" and a in here(), 60, message="a")
    _ends(server, _submit(server, tmp_path, "b", "true"))
    _ends(server, _submit(server, tmp_path, "c", "true"))
    # c's fetch put the cache over 1M: b (ended) went; a, older but in use, stayed
    assert here() == {a, c}
    with server.client() as cl:
        wait_until(lambda: bool(cl.artifact_nodes("a")), 30, message="the inventory")
        (node,) = cl.artifact_nodes("a")
        assert node.limit_bytes == LEAST_CACHE  # the server's, over --artifact-cache 10G
        assert [(p.sha256, p.held) for p in node.copies] == [(a, True)]
    stop.touch()
    _ends(server, long)
    _ends(server, _submit(server, tmp_path, "b", "true"))
    assert here() == {b}  # a is no longer in use: the least recently used go first
