"""What reading GPU use costs the agent (``hal.agent.gpuusage``), on a node with a GPU:
one ``GpuSampler.sample()`` (every process on every GPU, its memory and utilisation)
while N PyTorch processes work on GPU 0, beside the same facts asked of ``nvidia-smi``
(``--query-compute-apps``), the way a site's script reads them without HAL.

    PYTHONPATH=src python bench/gpu_sample.py [N]

Needs an NVIDIA driver and PyTorch (the device machine has both); prints JSON.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time

from hal.agent.gpuusage import GpuSampler

WORK = (
    "import torch, time\n"
    "x = torch.randn(2048, 2048, device='cuda')\n"
    "t = time.time()\n"
    "while time.time() - t < 60: x @ x\n"
)


def timed(call: object, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        call()  # type: ignore[operator]
        times.append((time.perf_counter() - began) * 1000)
    return times


def summary(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {
        "p50_ms": round(statistics.median(times), 3),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 3),
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    sampler = GpuSampler.open()
    if sampler is None or shutil.which("nvidia-smi") is None:
        sys.exit("gpu_sample: needs an NVIDIA GPU, its driver and nvidia-ml-py")
    procs = [subprocess.Popen([sys.executable, "-c", WORK]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 60
        while len(sampler.sample()) < n and time.monotonic() < deadline:
            time.sleep(0.5)
        seen = sampler.sample()
        ours = timed(sampler.sample, 200)
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        smi = timed(lambda: subprocess.run(query, capture_output=True, check=True), 20)
        print(
            json.dumps(
                {
                    "gpu_processes": n,
                    "seen": len([p for p in procs if p.pid in seen]),
                    "hal_sample": summary(ours),
                    "nvidia_smi_query": summary(smi),
                }
            )
        )
    finally:
        sampler.close()
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
