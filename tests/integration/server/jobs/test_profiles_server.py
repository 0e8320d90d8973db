"""A job's profile end to end: a real CPU spinner on a real agent, submitted with
``--latency-sensitive``; its agent's samples reach the server, which classes it ``cpu``
and keeps the class with the job (``extra[PROFILE_CLASS]``, after its samples agree),
and ``hal show``, ``hal show --json`` and ``GET /v1/jobs/{id}`` show the profile while
it runs, the class and the mark after it ends."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hal.testing import http
from hal.testing.live import LiveServer, wait_until

SPIN = f"{sys.executable} -c 'while True: pass'"


def test_a_spinners_profile_and_class_show_everywhere(server: LiveServer, tmp_path: Path) -> None:
    done = server.cli(
        "sbatch", "--parsable", "-c", "1", "--latency-sensitive", "--wrap", SPIN, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    with server.client() as c:
        wait_until(
            lambda: c.job(job_id).profile_class == "cpu",
            timeout=60,
            message="the spinner classed cpu",
        )
        info = c.job(job_id)
    assert info.state == "RUNNING" and info.latency_sensitive
    profile = info.profile
    assert profile is not None and profile.source in ("cgroup2", "cgroup1", "proc")
    assert profile.cpu_util + (profile.cpu_pressure or 0.0) > 0.3  # (a busy host shares it)
    assert profile.write_bytes_per_s < 20e6 and profile.rss_bytes > 0

    raw = http.get(
        f"{server.url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {server.token}"}
    ).json()
    assert raw["profile_class"] == "cpu" and raw["latency_sensitive"] is True
    assert set(raw["profile"]) >= {"cpu_util", "rss_bytes", "read_bytes_per_s", "io_pressure"}

    shown = server.cli("show", job_id)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if "Profile=" in x).strip()
    assert line.startswith("Profile=cpu LatencySensitive=yes CPUBusy="), line
    assert " RSS=" in line and " Write=" in line
    assert ("Pressure=cpu:" in line) == (profile.cpu_pressure is not None), line
    as_json = json.loads(server.cli("show", job_id, "--json").stdout)
    assert as_json["profile"]["source"] == profile.source

    assert server.cli("scancel", job_id).returncode == 0
    with server.client() as c:
        wait_until(lambda: c.job(job_id).end_time is not None, message="the cancel")
        ended = c.job(job_id)
    assert ended.profile is None  # no samples of an ended job
    assert (ended.profile_class, ended.latency_sensitive) == ("cpu", True)
    after = server.cli("show", job_id).stdout
    assert "Profile=cpu LatencySensitive=yes" in after and "CPUBusy" not in after
