"""What running a job with a program shipped to its node costs: HAL's artifacts against
Slurm's sbcast, on one node each, on this machine.

    python bench/artifact_deploy.py [SIZE_MB] [ROUNDS]

HAL: a live server (SQLite) and one agent. The file (SIZE_MB of random bytes, as a
single program) is published once (``push_s``). Each round publishes it again under a
new version with one byte changed (so the node must fetch it) and times three jobs from
submission to COMPLETED: without an artifact (``plain_job_s``), with the new version
(``first_job_s``: fetch, check, install on the node) and with it again (``cached_job_s``:
the node's copy).

Slurm (the peer, 22.05 from Debian, munged + slurmctld + slurmd in a temporary folder):
a job that runs ``sbcast FILE /tmp/...`` (Slurm's way to put a file on a job's nodes),
timed inside the job (``median_sbcast_s``). sbcast copies again in every job: it has no
cache. Against it stands HAL's ``median_fetch_s``: the first job's time less the plain
job's.

Prints JSON: each side's medians and every round's figures.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hal.bench.slurm_peer import SlurmCluster
from hal.testing.live import LiveServer
from hal.wire.submit import JobSubmit


def _until_done(client, job: int, timeout: float = 300.0) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    while (state := client.job(job).state) in ("PENDING", "RUNNING", "COMPLETING"):
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"job {job} did not end within {timeout} s")
        time.sleep(0.02)
    if state != "COMPLETED":
        raise RuntimeError(f"job {job} ended {state}")
    return time.monotonic()


def _hal(path: Path, rounds: int, work: Path) -> dict[str, object]:
    out: dict[str, list[float]] = {"plain_job_s": [], "first_job_s": [], "cached_job_s": []}
    with LiveServer(work / "hal") as live, live.agents(1, cpus=2), live.client() as c:
        began = time.monotonic()
        c.push_artifact("payload", "0", path)
        push_s = time.monotonic() - began
        data = bytearray(path.read_bytes())
        for n in range(1, rounds + 1):
            data[0] = n  # new content: the node has no copy of it
            path.write_bytes(data)
            c.push_artifact("payload", str(n), path)
            for label, artifacts in (
                ("plain_job_s", []),
                ("first_job_s", [f"payload@{n}"]),
                ("cached_job_s", [f"payload@{n}"]),
            ):
                script = (
                    '#!/bin/sh\ntest -z "$HAL_ARTIFACT_PAYLOAD" || test -x $HAL_ARTIFACT_PAYLOAD\n'
                )
                job = JobSubmit(script=script, workdir=str(work), artifacts=artifacts)
                began = time.monotonic()
                job_id = c.submit(job).job_id
                out[label].append(_until_done(c, job_id) - began)
    return {
        "push_s": round(push_s, 3),
        **{f"median_{k}": round(statistics.median(v), 3) for k, v in out.items()},
        # what the artifact adds to a job: its first run on the node, and again
        "median_fetch_s": round(
            statistics.median(out["first_job_s"]) - statistics.median(out["plain_job_s"]), 3
        ),
        "rounds": {k: [round(x, 3) for x in v] for k, v in out.items()},
    }


def _slurm(path: Path, rounds: int, work: Path) -> dict[str, object]:
    """sbcast's own time, read inside the job (``sbatch --wait`` polls in steps of
    seconds, too coarse for the job's time)."""
    copies: list[float] = []
    with SlurmCluster() as slurm:
        for n in range(rounds):
            target, stamps = f"/tmp/hal-bench-payload-{n}", work / f"sbcast-{n}.txt"
            script = work / f"sbcast-{n}.sh"
            script.write_text(
                f"#!/bin/sh\nt0=$(date +%s.%N)\nsbcast -f {path} {target} && test -s {target}\n"
                f"echo $t0 $(date +%s.%N) > {stamps}\n"
            )
            slurm.sbatch("--wait", str(script))
            t0, t1 = map(float, stamps.read_text().split())
            copies.append(t1 - t0)
            Path(target).unlink(missing_ok=True)
    return {
        "median_sbcast_s": round(statistics.median(copies), 3),
        "rounds": [round(x, 3) for x in copies],
    }


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    with tempfile.TemporaryDirectory(prefix="hal-artifact-bench-") as tmp:
        work = Path(tmp)
        path = work / "payload"
        path.write_bytes(os.urandom(size_mb * 1024 * 1024))
        path.chmod(0o755)
        result = {
            "size_mb": size_mb,
            "hal": _hal(path, rounds, work),
            "slurm_sbcast": _slurm(path, rounds, work),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
