"""Set-up shared by the workflow-tool tests: a real HAL cluster and Slurm-named shims.

Each test module gets its own control plane (SQLite in a temp dir) with two real
``hal agent`` processes. The tools under test call ``sbatch``/``squeue``/... by name, so
the HAL shims are installed into a temp bin directory that goes FIRST on ``PATH`` (in
``os.environ`` for the test's duration, so both the tool's own subprocesses and the jobs
that inherit ``--export=ALL`` find them). This machine may have a real Slurm in
/usr/bin: ``install_shims(force=True)`` writes into our own directory only, and
``slurm_env`` asserts that every Slurm name resolves to a shim (or, for the commands HAL
does not provide, to a failing stub), so no test can reach real Slurm daemons.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hal.compat.shims import SHIM_COMMANDS, install_shims, is_shim
from hal.testing.live import LiveServer


@pytest.fixture(scope="module")
def hal_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A HAL control plane with two agents of 2 CPUs / 2 GiB each."""
    data = tmp_path_factory.mktemp("hal")
    with (
        LiveServer(data, config_overrides={"kill_wait_seconds": 2}) as server,
        server.agents(2, cpus=2, memory="2G"),
    ):
        yield server


# Slurm client commands HAL does not provide; on this machine they would be the real
# Slurm's, so each is replaced by a stub that fails. (sacctmgr and sdiag are HAL's own
# shims now: Snakemake's plugin asks sacctmgr which accounts a user may name.)
UNSHIMMED_SLURM_COMMANDS = ("sattach", "sreport", "strigger")


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("shims")
    install_shims(target, force=True)  # force: a real Slurm may be on PATH; we go first
    for command in UNSHIMMED_SLURM_COMMANDS:
        stub = target / command
        stub.write_text(
            f"#!/bin/sh\necho '{command}: not provided by HAL (test guard)' >&2\nexit 1\n"
        )
        stub.chmod(0o755)
    return target


@pytest.fixture
def slurm_env(
    hal_cluster: LiveServer, shim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """``os.environ`` pointing the Slurm command names at HAL for this test only."""
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HAL_URL", hal_cluster.url)
    monkeypatch.setenv("HAL_TOKEN", hal_cluster.token)
    # Belt and braces: were a real Slurm binary reached anyway, it finds no config and
    # fails instead of talking to daemons.
    monkeypatch.setenv("SLURM_CONF", str(shim_dir / "no-slurm.conf"))
    for command in SHIM_COMMANDS:
        found = shutil.which(command)
        assert found is not None and is_shim(Path(found)), f"{command} -> {found}: not HAL's"
    for command in UNSHIMMED_SLURM_COMMANDS:
        assert shutil.which(command) == str(shim_dir / command)
    return dict(os.environ)


@pytest.fixture
def agent_logs(hal_cluster: LiveServer) -> Callable[[], str]:
    """The agents' log tails, for assertion messages when a job misbehaved."""

    def read() -> str:
        parts = []
        for log in sorted(hal_cluster.data_dir.glob("agent-*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    return read
