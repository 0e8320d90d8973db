"""What ``srun hostname`` from a login shell costs: HAL's srun, which now makes its own
allocation outside a job, against Slurm's, on this machine.

    python bench/srun_alloc.py [ROUNDS]

HAL: a live server (SQLite) and one agent; ``hal srun hostname`` run ROUNDS times, each
timed from the command's start to its exit (it submits the allocation, waits for it,
runs the step on the node, prints its output and gives the allocation back). The same
for ``hal srun -n2 hostname``, and ``hal salloc true`` (an allocation, a command run
here in it, the allocation given back).

Slurm (the peer, 22.05 from Debian: munged + slurmctld + slurmd in a temporary folder):
``srun hostname``, ``srun -n2 hostname`` and ``salloc true`` the same way.

Prints JSON: each side's median and every round.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hal.bench.slurm_peer import SlurmCluster
from hal.testing.live import LiveServer

# (command, its arguments); salloc runs ``true`` here, in the allocation it gets
CASES = {
    "one_task": ("srun", ["hostname"]),
    "two_tasks": ("srun", ["-n2", "hostname"]),
    "salloc_true": ("salloc", ["true"]),
}


def _time(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> float:
    began = time.monotonic()
    done = subprocess.run(list(argv), env=dict(env), cwd=cwd, capture_output=True, check=False)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.decode()}")
    return took


def _rounds(
    prefix: Sequence[str], env: Mapping[str, str], cwd: Path, rounds: int
) -> dict[str, object]:
    out = {}
    for case, (command, args) in CASES.items():
        argv = [*prefix, command, *args]
        _time(argv, env, cwd)  # (warm: the first start reads every module)
        times = [_time(argv, env, cwd) for _ in range(rounds)]
        out[case] = {"median_s": round(statistics.median(times), 3), "rounds": times}
    return out


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with tempfile.TemporaryDirectory(prefix="hal-srun-bench-") as tmp:
        work = Path(tmp)
        with LiveServer(work / "hal") as live, live.agents(1, cpus=2):
            env = {k: v for k, v in live.env().items() if not k.startswith("SLURM_")}
            hal = _rounds([sys.executable, "-m", "hal.cli.main"], env, work, rounds)
        with SlurmCluster() as slurm:
            slurm_side = _rounds([], slurm.env, work, rounds)
    result = {"rounds": rounds, "hal": hal, "slurm": slurm_side}
    for side in (hal, slurm_side):
        for case in side.values():
            assert isinstance(case, dict)
            case["rounds"] = [round(x, 3) for x in case["rounds"]]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
