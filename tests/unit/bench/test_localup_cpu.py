"""``cluster_cpu_seconds`` sums a real process tree's CPU time by role: the root is the
server, its children the agents, their children the step launchers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hal.bench.localup import cluster_cpu_seconds
from hal.testing.live import wait_until

TREE = """
import subprocess, sys, time
role, done = sys.argv[1], sys.argv[2]
below = {"server": "agent", "agent": "launcher"}.get(role)
if below:
    subprocess.Popen([sys.executable, __file__, below, done])
end = time.process_time() + {"server": 1.0, "agent": 0.6, "launcher": 0.2}[role]
while time.process_time() < end:
    pass
open(done + "." + role, "w").close()
time.sleep(60)
"""


def test_cpu_is_summed_by_role(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    done = str(tmp_path / "done")
    root = subprocess.Popen([sys.executable, str(script), "server", done], start_new_session=True)
    try:
        roles = ("server", "agent", "launcher")
        wait_until(lambda: all(Path(f"{done}.{r}").exists() for r in roles), 30, message="burn")
        cpu = cluster_cpu_seconds(root.pid)
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
    # each burned its share; interpreter start-up adds a little, never another's share
    assert 1.0 <= cpu["server"] < 1.4
    assert 0.6 <= cpu["agents"] < 1.0
    assert 0.2 <= cpu["launchers"] < 0.6
