"""GPU health end to end: an agent whose GPU shows uncorrectable ECC errors has its node
drained with them as the reason (sinfo's REASON, an alert, the agent's /metrics), GPU jobs
wait; once the agent reads no problem the node resumes and they run. An operator's
drain stays. The agent's NVML is the stand-in in ``tests/data/nvml``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hal.testing import http
from hal.testing.live import LiveServer, free_port, wait_until

STAND_IN = str(Path(__file__).parents[3] / "data" / "nvml")


def test_gpu_problems_drain_the_node_until_they_are_gone(tmp_path: Path) -> None:
    health = tmp_path / "health.json"
    port = free_port()
    path = os.pathsep.join(p for p in (STAND_IN, os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, "HAL_TEST_NVML_GPUS": "2", "HAL_TEST_NVML_HEALTH": str(health)}
    extra = ["--gpu-health-interval", "0.5", "--metrics-listen", f"127.0.0.1:{port}"]
    with LiveServer(tmp_path / "hal", config_overrides={"heartbeat_interval_seconds": 1}) as s:
        s.start_agent("gpu1", cpus=2, memory="1G", extra=extra, env=env)
        with s.client() as c:

            def node() -> tuple[str, str]:
                found = [(n.state, n.reason) for n in c.nodes() if n.name == "gpu1"]
                return found[0] if found else ("", "")

            def problems() -> str:
                text = http.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                found = [line for line in text.splitlines() if line.startswith("hal_agent_gpu_p")]
                return found[0].split()[-1] if found else ""

            wait_until(lambda: node()[0] == "UP" and problems() == "0.0", message="a healthy node")
            health.write_text(json.dumps({"ecc": {"1": 2}}))
            wait_until(lambda: node()[0] == "DRAIN", timeout=30, message="the node drained")
            reason = "gpu health: GPU 1 has 2 uncorrectable ECC errors since the driver loaded"
            assert node() == ("DRAIN", reason)
            assert problems() == "1.0"
            server_metrics = http.get(s.url + "/metrics", timeout=5).text
            assert 'hal_node_gpu_problems{node="gpu1"} 1.0' in server_metrics
            sinfo = s.cli("sinfo", "-N", "-h", "-o", "%N|%t|%E")
            assert sinfo.stdout.strip() == f"gpu1|drain|{reason}", sinfo
            wait_until(
                lambda: any(
                    a["name"] == "HalGpuUnhealthy"
                    for a in http.get(
                        s.url + "/v1/alerts",
                        headers={"Authorization": f"Bearer {s.token}"},
                        timeout=5,
                    ).json()["alerts"]
                ),
                timeout=10,
                message="the GPU alert",
            )
            job = s.cli("sbatch", "--parsable", "--gres=gpu:1", "--wrap", "true", cwd=tmp_path)
            job_id = job.stdout.strip()
            assert c.job(job_id).state == "PENDING"

            health.write_text("{}")  # the GPU was reset
            wait_until(lambda: node()[0] == "UP", timeout=30, message="the node resumed")
            wait_until(lambda: c.job(job_id).state == "COMPLETED", timeout=30, message="the job")

            update = ["scontrol", "update", "NodeName=gpu1", "State=DRAIN", "Reason=maint"]
            assert s.cli(*update).returncode == 0
            health.write_text(json.dumps({"remap_pending": [0]}))
            wait_until(lambda: problems() == "1.0", timeout=30, message="the next problem read")
            health.write_text("{}")
            wait_until(lambda: problems() == "0.0", timeout=30, message="a clean read")
            assert node() == ("DRAIN", "maint")  # an operator's drain is the operator's
