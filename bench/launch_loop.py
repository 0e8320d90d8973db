"""Per-job launch cost on the agent side: N jobs through the step launcher's code path.

Runs ``hal.agent.forkserver.launch`` in this process (as the launcher does) for N
``/bin/true`` jobs, one after another, waits for each job's status file, and prints the
wall time, the whole loop's CPU time and the CPU spent inside ``launch`` alone per job
as JSON (children are reaped by the kernel, so their CPU is not counted).

    PYTHONPATH=src python bench/launch_loop.py [N]

``ISO=cgroup1 ISO_BASE=/sys/fs/cgroup/memory/hal/probe`` (an existing cgroup folder) runs
the jobs with that isolation backend instead of ``none``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

from hal.agent.forkserver import launch
from hal.agent.handshake import PLAN_FILE
from hal.agent.isolation import Isolation
from hal.agent.supervisor import STATUS_FILE, StepPlan


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # as in the launcher: the kernel reaps
    isolation = Isolation(os.environ.get("ISO", "none"), os.environ.get("ISO_BASE", ""))
    with tempfile.TemporaryDirectory() as root:
        t0, c0 = time.perf_counter(), os.times()
        launch_cpu = 0.0  # CPU inside launch() alone, without this loop's own file work
        for i in range(n):
            job_dir = os.path.join(root, str(i))
            os.mkdir(job_dir)
            plan = StepPlan(
                i,
                0,
                job_dir,
                ("/bin/true",),
                {"PATH": "/usr/bin:/bin"},
                root,
                os.path.join(job_dir, "out"),
                None,
                False,
                0,
                False,
            )
            with open(os.path.join(job_dir, PLAN_FILE), "w") as f:
                f.write(plan.to_json())
            r, w = os.pipe()
            t = time.thread_time()
            reply = launch({"job_id": i, "key": 0, "job_dir": job_dir}, w, isolation)
            launch_cpu += time.thread_time() - t
            os.close(w)
            if "error" in reply:
                raise SystemExit(str(reply["error"]))
            while os.read(r, 4096):
                pass
            os.close(r)
            while not os.path.exists(os.path.join(job_dir, STATUS_FILE)):
                time.sleep(0.0005)
        wall, c1 = time.perf_counter() - t0, os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(
        json.dumps(
            {
                "jobs": n,
                "wall_ms_per_job": round(1000 * wall / n, 3),
                "launcher_cpu_ms_per_job": round(1000 * cpu / n, 3),
                "launch_call_cpu_ms_per_job": round(1000 * launch_cpu / n, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
