"""What ``sbcast`` costs: HAL's, which sends the file as srun's input through the control
plane to one task per node, against Slurm's, on this machine.

    python bench/sbcast.py [ROUNDS]

Each side runs, inside an allocation (``salloc -N NODES sh -c ...``), ``sbcast -f FILE
DEST`` for files of 1 MiB and 20 MiB, ROUNDS times each, timing the sbcast command
alone (``date +%s.%N`` before and after, in the allocation's shell). HAL: a live server
(SQLite) and two agents, the copy going to both. Slurm: the peer (22.05 from Debian, one
node). Prints JSON: each side's median per size and every round.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from hal.bench.slurm_peer import SlurmCluster
from hal.testing.live import LiveServer

SIZES_MIB = (1, 20)


def _rounds(
    prefix: Sequence[str], env: Mapping[str, str], work: Path, nodes: int, rounds: int
) -> dict[str, object]:
    sbcast = shlex.join([*prefix, "sbcast"])
    lines = []
    for mib in SIZES_MIB:
        source = work / f"src-{mib}"
        source.write_bytes(os.urandom(mib << 20))
        for _ in range(rounds + 1):  # (the first warms the page cache and imports)
            lines.append(
                f"a=$(date +%s.%N); {sbcast} -f {source} {work}/dest-{mib} || exit 1; "
                f'b=$(date +%s.%N); echo "{mib} $a $b"'
            )
    script = "\n".join(lines)
    done = subprocess.run(
        [*prefix, "salloc", f"-N{nodes}", "sh", "-c", script],
        env=dict(env), cwd=work, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"salloc failed: {done.stderr}")
    took: dict[int, list[float]] = {mib: [] for mib in SIZES_MIB}
    for line in done.stdout.splitlines():
        mib, began, ended = line.split()
        took[int(mib)].append(float(ended) - float(began))
    out: dict[str, object] = {"nodes": nodes}
    for mib, times in took.items():
        kept = [round(t, 3) for t in times[1:]]
        out[f"{mib}_mib"] = {"median_s": round(statistics.median(kept), 3), "rounds": kept}
    return out


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="hal-sbcast-bench-") as tmp:
        work = Path(tmp)
        (work / "hal").mkdir()
        with LiveServer(work / "hal" / "data") as live, live.agents(2, cpus=2):
            env = {k: v for k, v in live.env().items() if not k.startswith("SLURM_")}
            hal_cli = [os.path.abspath(sys.executable), "-m", "hal.cli.main"]
            hal = _rounds(hal_cli, env, work / "hal", 2, rounds)
        (work / "slurm").mkdir()
        with SlurmCluster() as slurm:
            slurm_side = _rounds([], slurm.env, work / "slurm", 1, rounds)
    print(json.dumps({"rounds": rounds, "hal": hal, "slurm": slurm_side}, indent=2))


if __name__ == "__main__":
    main()
