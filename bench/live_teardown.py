"""How long a test cluster (``LiveServer``) takes to stop with one agent registered and
idle, and whether it leaves processes behind: what every integration test module with
agents pays at teardown. Prints one JSON object::

    python bench/live_teardown.py [REPEATS]
    PYTHONPATH=/path/to/other/tree/src python bench/live_teardown.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from hal.testing.live import LiveServer


def one() -> tuple[float, int]:
    """Seconds ``stop`` took, and the fork-server processes of this cluster left after."""
    with tempfile.TemporaryDirectory(prefix="hal-teardown-") as d:
        live = LiveServer(Path(d))
        live.start()
        with live.agents(1):
            live.cli("sbatch", "--wrap", "sleep 600", cwd=Path(d))  # a job still running at the end
            time.sleep(2)  # the agent's sync and output poll are now held by the server
        began = time.perf_counter()
        live.stop()
        took = time.perf_counter() - began
        left = [p for p in psutil.process_iter(["cmdline"]) if _ours(p, d, live.url)]
        for p in left:  # so that repeats and the caller start clean
            p.kill()
        return took, len(left)


def _ours(proc: psutil.Process, data_dir: str, url: str) -> bool:
    """A job of this cluster (its script lies under the data dir) or one of its agents'
    fork servers (they inherit the cluster's ``HAL_URL``)."""
    try:
        if data_dir in " ".join(proc.info["cmdline"] or ()):
            return True
        return "hal.agent.forkserver" in (proc.info["cmdline"] or ()) and (
            proc.environ().get("HAL_URL") == url
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs = [one() for _ in range(repeats)]
    print(
        json.dumps(
            {
                "repeats": repeats,
                "stop_s": [round(t, 2) for t, _ in runs],
                "median_stop_s": round(statistics.median(t for t, _ in runs), 2),
                "processes_left": [n for _, n in runs],
            }
        )
    )


if __name__ == "__main__":
    main()
