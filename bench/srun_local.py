"""What recording a step costs ``srun`` on the batch node (ADR 0012): a one-node job runs
``srun true`` N times with the server reachable (each srun opens and closes its step:
two requests) and N times with ``HAL_URL`` on a closed port (the same srun, whose
record fails at once: the baseline, in the same job), and N times ``srun --gpus=0 true``
(a step asking for GPUs: created through the control plane and run by the agent, as
every GPU step is); then the two requests alone, from one client, M times in a running
job (what srun adds, without its start-up's noise).
Prints one JSON object::

    python bench/srun_local.py [N [M]]
    PYTHONPATH=/path/to/other/tree/src python bench/srun_local.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hal.testing.live import LiveServer, free_port, wait_until

SCRIPT = """#!/bin/bash
srun="{python} -m hal.cli.main srun"
for i in $(seq {n}); do
  a=$(date +%s%N); $srun true; b=$(date +%s%N); echo recorded $((b - a))
  a=$(date +%s%N); HAL_URL={down} $srun true 2>/dev/null; b=$(date +%s%N); echo baseline $((b - a))
  a=$(date +%s%N); $srun --gpus=0 true; b=$(date +%s%N); echo agent $((b - a))
done
"""


def main(n: int, m: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="hal-srun-") as d:
        work = Path(d)
        with LiveServer(work / "data") as live, live.agents(1):
            script = work / "job.sh"
            down = f"http://127.0.0.1:{free_port()}"
            script.write_text(SCRIPT.format(python=sys.executable, n=n, down=down))
            done = live.cli("sbatch", "--parsable", str(script), cwd=work)
            job_id = int(done.stdout.strip())

            def ended() -> bool:
                with live.client() as c:
                    return c.job(job_id).state in ("COMPLETED", "FAILED")

            wait_until(ended, 60 + 2 * n, message="the job to end")
            lines = (work / f"slurm-{job_id}.out").read_text().split()
            requests = _requests(live, work, m)
    times: dict[str, list[float]] = {"recorded": [], "baseline": [], "agent": []}
    for kind, value in zip(lines[::2], lines[1::2], strict=True):
        times[kind].append(int(value) / 1e6)
    recorded = statistics.median(times["recorded"])
    baseline = statistics.median(times["baseline"])
    return {
        "runs": n,
        "srun_true_ms_p50_recorded": round(recorded, 1),
        "srun_true_ms_p50_baseline": round(baseline, 1),
        "added_ms_p50": round(recorded - baseline, 1),
        # a step asking for GPUs (here none: --gpus=0) is run by the agent, not srun
        "srun_true_ms_p50_through_agent": round(statistics.median(times["agent"]), 1),
        "open_and_close_ms_p50": round(statistics.median(requests), 2),
        "open_and_close_ms_p95": round(statistics.quantiles(requests, n=20)[-1], 2),
    }


def _requests(live: LiveServer, work: Path, m: int) -> list[float]:
    """Milliseconds of open + close of a local step, ``m`` times, in a running job."""
    done = live.cli("sbatch", "--parsable", "--wrap", "sleep 600", cwd=work)
    job_id = int(done.stdout.strip())
    took: list[float] = []
    with live.client() as c:
        wait_until(lambda: c.job(job_id).state == "RUNNING", 30, message="the job to run")
        for _ in range(m):
            began = time.perf_counter()
            opened = c.open_local_step(job_id, node="node1", ntasks=1, name="true", argv=["true"])
            # (the step id and its CPUs; an older tree answers the id alone)
            step = opened[0] if isinstance(opened, tuple) else opened
            c.end_local_step(job_id, step, exit_code=0)
            took.append((time.perf_counter() - began) * 1000)
        c.cancel(job_id)
    return took


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(main(*args, *[30, 300][len(args) :])))
