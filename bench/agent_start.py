"""CPU (user + sys) of a ``hal agent`` from its start to UP, and of its fork server once
started, over a ``LiveServer`` on SQLite: what each live test pays per agent. Give one
or more source trees (``SRC`` folders holding ``hal``) to compare them: their agents
start alternately, one tree then the other, so a change in the machine's load falls on
both alike.

    PYTHONPATH=src python bench/agent_start.py [--starts N] [SRC ...]

Write each tree's bytecode first (``python -m compileall -q SRC/hal``): with
``PYTHONDONTWRITEBYTECODE`` set, an agent of a tree without it compiles every module.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from hal.testing.live import LiveServer, stop_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10, help="agents per tree (10)")
    parser.add_argument("trees", nargs="*", default=["src"], help="source trees (src)")
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    for tree in trees:
        if not (Path(tree) / "hal" / "agent").is_dir():
            parser.error(f"{tree} holds no hal/agent: give a source folder such as src")
    agent_cpu: dict[str, list[float]] = {t: [] for t in trees}
    forkserver_cpu: dict[str, list[float]] = {t: [] for t in trees}
    load = [open("/proc/loadavg").read().split()[0]]  # noqa: SIM115
    with tempfile.TemporaryDirectory() as tmp, LiveServer(Path(tmp)) as server:
        with server.client() as client:
            for i in range(args.starts):
                for n, tree in enumerate(trees if i % 2 == 0 else trees[::-1]):
                    name = f"a{i}-{n}"
                    proc = server.start_agent(name, env={"PYTHONPATH": tree})
                    agent = psutil.Process(proc.pid)
                    while True:
                        cpu = agent.cpu_times()
                        if any(x.name == name and x.state == "UP" for x in client.nodes()):
                            break
                        time.sleep(0.01)
                    agent_cpu[tree].append(cpu.user + cpu.system)
                    time.sleep(0.3)  # its fork server, started at the agent's start, is idle
                    for child in agent.children():
                        if "hal.agent.forkserver" in child.cmdline():
                            fs = child.cpu_times()
                            forkserver_cpu[tree].append(fs.user + fs.system)
                    stop_process(proc)
        server.end_fork_servers()
    load.append(open("/proc/loadavg").read().split()[0])  # noqa: SIM115
    for tree in trees:
        runs, forks = agent_cpu[tree], forkserver_cpu[tree]
        print(
            f"{tree}: agent to UP median {statistics.median(runs):.3f} s "
            f"(min {min(runs):.3f}, max {max(runs):.3f}, {len(runs)} starts); fork server "
            f"{statistics.median(forks) if forks else float('nan'):.3f} s"
        )
    print(f"load average (1 min) {load[0]} before, {load[1]} after")


if __name__ == "__main__":
    main()
