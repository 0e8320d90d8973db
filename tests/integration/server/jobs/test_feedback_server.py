"""Application feedback end to end: a real job on a real agent reports with ``hal
feedback`` and ``hal.feedback.report`` under the token HAL put in its environment; the
values show in ``hal show``, ``sacct -o Feedback``, REST and, while it runs, /metrics;
its token is refused for another job, and for itself once it has ended."""

from __future__ import annotations

import sys
from pathlib import Path

from hal.testing import http
from hal.testing.live import LiveServer, wait_until

PY = sys.executable


def state(server: LiveServer, job_id: int) -> str:
    with server.client() as c:
        return c.job(job_id).state


def test_a_job_reports_and_its_values_show_everywhere(server: LiveServer, tmp_path: Path) -> None:
    other = server.cli(
        "sbatch", "--parsable", "--wrap",
        f"{PY} -m hal.cli.main feedback queue_depth=3 && sleep 60", cwd=tmp_path,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    other_id = int(other.stdout)
    wait_until(lambda: state(server, other_id) == "RUNNING", message="the other job to run")
    # the running job's value is a gauge on /metrics
    metric = f'hal_job_feedback{{job_id="{other_id}",metric="queue_depth"}} 3.0'
    wait_until(
        lambda: metric in http.get(f"{server.url}/metrics").text,
        message="the other job's feedback on /metrics",
    )
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#HAL --feedback-goal=samples_per_s:max,latency_ms:min\n"
        f"{PY} -m hal.cli.main feedback samples_per_s=1830 latency_ms=12.5 || exit 1\n"
        f"{PY} -c 'import hal.feedback; hal.feedback.report(samples_per_s=1900.5)' || exit 1\n"
        f"{PY} -m hal.cli.main feedback bad-name=1; echo bad=$?\n"
        # its own token, for the other job
        f'{PY} -c \'import os, httpx; print("other", httpx.post('
        f'os.environ["HAL_URL"] + "/v1/jobs/{other_id}/feedback", '
        'json={"metrics": {"x": 1}}, headers={"Authorization": "Bearer " + '
        'os.environ["HAL_FEEDBACK_TOKEN"]}).status_code)\'\n'
        'echo "token=$HAL_FEEDBACK_TOKEN"\n'
    )
    done = server.cli("sbatch", "--parsable", str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    wait_until(
        lambda: state(server, job_id) not in ("PENDING", "RUNNING", "COMPLETING"),
        message="the reporting job to end",
    )
    out = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert state(server, job_id) == "COMPLETED", out
    assert "bad=2" in out  # a malformed name: refused, exit 2
    assert "other 401" in out  # a job cannot report for another
    token = out.split("token=")[1].split()[0]

    with server.client() as c:
        found = c.job_feedback(job_id)
        other_found = c.job_feedback(other_id)
    by_name = {m.name: m for m in found.metrics}
    assert sorted(by_name) == ["latency_ms", "samples_per_s"]
    samples = by_name["samples_per_s"]
    assert (samples.goal, samples.count, samples.latest) == ("max", 2, 1900.5)
    assert [v for _, v in samples.points] == [1830.0, 1900.5]
    assert (by_name["latency_ms"].goal, by_name["latency_ms"].latest) == ("min", 12.5)
    assert [m.name for m in other_found.metrics] == ["queue_depth"]  # and no "x"

    shown = server.cli("show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "FeedbackGoal=samples_per_s:max,latency_ms:min" in shown.stdout
    assert "latency_ms=12.5 (min, 1 report)  samples_per_s=1900.5 (max, 2 reports)" in shown.stdout
    acct = server.cli(
        "sacct", "-X", "-P", "-n", "-o", "JobID,Feedback", "-j", f"{job_id},{other_id}"
    )
    assert acct.returncode == 0, acct.stderr
    assert acct.stdout.splitlines() == [
        f"{other_id}|queue_depth=3",
        f"{job_id}|latency_ms=12.5,samples_per_s=1900.5",
    ]

    # its own token once it has ended: refused, nothing kept; a bad token: 401
    url = f"{server.url}/v1/jobs/{job_id}/feedback"
    ended = http.post(
        url, json={"metrics": {"late": 1}}, headers={"Authorization": f"Bearer {token}"}
    )
    assert ended.status_code == 409, ended.text
    forged = http.post(url, json={"metrics": {"x": 1}}, headers={"Authorization": "Bearer halfb_x"})
    assert forged.status_code == 401, forged.text
    with server.client() as c:
        assert [m.name for m in c.job_feedback(job_id).metrics] == ["latency_ms", "samples_per_s"]
        c.cancel(other_id)
    wait_until(lambda: state(server, other_id) != "RUNNING", message="the other job to end")
    assert f'job_id="{other_id}"' not in http.get(f"{server.url}/metrics").text
