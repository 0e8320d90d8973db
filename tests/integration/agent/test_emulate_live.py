"""``hal emulate`` against a real control plane: 100 emulated nodes in one process register
through the agent protocol, take jobs, run them as timers and report their ends; the
server cannot tell them from real agents (sinfo lists them, sacct has every job with the
state its run time, exit code, time limit or cancel gives it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.submit import JobSubmit

NODES = 100
JOBS = 300  # more than the 200 CPUs: a second wave starts as the first ends
ENDED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY"}


def start_emulator(live: LiveServer, nodes: int, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "hal.cli.main", "emulate", "--server", live.url]
    cmd += ["--nodes", str(nodes), "--cpus", "2", "--memory", "4G", "--runtime", "1", *extra]
    log = open(live.data_dir / "emulate.log", "ab")  # noqa: SIM115 - owned by the process
    env = {**live.env(), "HAL_TOKEN": live.agent_token}
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def sacct(live: LiveServer) -> dict[str, tuple[str, str, str]]:
    done = live.cli("sacct", "-X", "-n", "-P", "-a", "-o", "JobID,State,ExitCode,NodeList")
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line]
    return {r[0]: (r[1].split()[0], r[2], r[3]) for r in rows}


@pytest.mark.timeout(300)
def test_a_hundred_emulated_nodes_run_jobs_through_the_real_protocol(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "srv") as live:
        emulator = start_emulator(live, NODES)
        try:
            with live.client() as client:
                wait_until(
                    lambda: sum(n.state == "UP" for n in client.nodes()) == NODES,
                    timeout=120,
                    message=f"{NODES} emulated nodes to register",
                )
            shown = live.cli("sinfo", "-h", "-N", "-o", "%N %c %t")
            assert shown.returncode == 0, shown.stderr
            lines = shown.stdout.split("\n")
            rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
            assert set(rows) == {f"emu{i}" for i in range(1, NODES + 1)}
            assert all(r == ["2", "idle"] for r in rows.values()), rows

            plain = "#!/bin/sh\n#HAL_EMULATE runtime=1\nexit 0\n"
            with live.client() as client:
                jobs = client.submit_many(
                    [JobSubmit(script=plain, workdir="/tmp", name=f"e{i}") for i in range(JOBS)]
                )
                ids = [str(j.job_id) for j in jobs]
                failing = client.submit(
                    JobSubmit(
                        script="#!/bin/sh\n#HAL_EMULATE runtime=1 exit=3\n",
                        workdir="/tmp",
                        name="fails",
                    )
                ).job_id
                over = client.submit(
                    JobSubmit(
                        script="#!/bin/sh\n",
                        workdir="/tmp",
                        name="over",
                        time_limit_seconds=3,  # the environment's hour is longer
                        environment={"HAL_EMULATE_RUNTIME": "3600"},
                    )
                ).job_id
                long = client.submit(
                    JobSubmit(
                        script="#!/bin/sh\n#HAL_EMULATE runtime=3600\n",
                        workdir="/tmp",
                        name="long",
                    )
                ).job_id

                def running(job: int) -> bool:
                    return client.jobs(ids=[str(job)])[0].state == "RUNNING"

                wait_until(lambda: running(long), timeout=60, message="the long job to start")
                assert live.cli("scancel", str(long)).returncode == 0

                def all_ended() -> bool:
                    states = {j.id: j.state for j in client.jobs(history=True)}
                    return len(states) == JOBS + 3 and set(states.values()) <= ENDED

                wait_until(all_ended, timeout=180, message="every job to end")
            got = sacct(live)
            assert len(got) == JOBS + 3, got
            assert {got[i][:2] for i in ids} == {("COMPLETED", "0:0")}
            assert got[str(failing)][:2] == ("FAILED", "3:0")
            assert got[str(long)][0] == "CANCELLED"
            # the hour-long job ends at its limit, by the agent's own state machine
            assert got[str(over)][0] == "TIMEOUT"
            used = {got[i][2] for i in ids}
            assert len(used) >= NODES // 2, sorted(used)  # spread over the emulated nodes
            assert used <= {f"emu{i}" for i in range(1, NODES + 1)}
        finally:
            stop_process(emulator)
        assert emulator.returncode == 0, (live.data_dir / "emulate.log").read_text()[-3000:]


def test_an_emulator_whose_token_is_refused_says_so_once_and_exits(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "srv") as live:
        cmd = [sys.executable, "-m", "hal.cli.main", "emulate", "--server", live.url]
        done = subprocess.run(
            [*cmd, "--nodes", "20", "--log-format", "console"],
            env={**live.env(), "HAL_TOKEN": "hal_not_a_token"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        said = [line for line in done.stdout.splitlines() if "refused the emulator" in line]
        assert done.returncode == 3, done.stdout + done.stderr
        assert len(said) == 1, done.stdout
        assert "hal user add NAME --agent" in said[0]
        with live.client() as client:
            assert not client.nodes()
