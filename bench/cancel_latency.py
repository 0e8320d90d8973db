"""How long ``scancel JOB`` takes to end a running job, from the command to the job's
CANCELLED, on a test cluster (``LiveServer``, one agent, KillWait 30 s): a plain batch
script (``sleep``), and one running an srun step on the batch node (``srun sleep``),
whose srun and tasks the agent now leaves KillWait to end on the SIGTERM rather than
SIGKILL the moment the batch shell has gone. Prints one JSON object::

    python bench/cancel_latency.py [JOBS]
    PYTHONPATH=/path/to/other/tree/src python bench/cancel_latency.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hal.testing.live import LiveServer, wait_until

CASES = {"plain": "sleep 300", "srun": f"{sys.executable} -m hal.cli.main srun sleep 300"}


def state(live: LiveServer, job_id: int) -> str:
    with live.client() as c:
        return c.job(job_id).state


def cancel_seconds(live: LiveServer, work: Path, body: str) -> float:
    script = work / "job.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    done = live.cli("sbatch", "--parsable", str(script), cwd=work)
    job_id = int(done.stdout.strip())
    wait_until(lambda: state(live, job_id) == "RUNNING", 60)
    if "srun" in body:  # its step running
        wait_until(lambda: bool(live.client().job_steps(job_id)), 60)
    time.sleep(0.5)
    began = time.perf_counter()
    live.cli("scancel", str(job_id))
    wait_until(lambda: state(live, job_id) == "CANCELLED", 60, interval=0.01)
    return time.perf_counter() - began


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    result: dict[str, object] = {"jobs": jobs}
    with tempfile.TemporaryDirectory(prefix="hal-cancel-") as d:
        work = Path(d)
        with LiveServer(work / "srv") as live, live.agents(1, cpus=2, memory="1G"):
            for name, body in CASES.items():
                took = [cancel_seconds(live, work, body) for _ in range(jobs)]
                result[name] = {
                    "median_s": round(statistics.median(took), 3),
                    "max_s": round(max(took), 3),
                }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
