"""What ``sacct`` of J ended jobs costs in CPU seconds, in one process (so a loaded
machine's figures compare): the server's answer of the history (``job_info`` of each
job and its JSON, every field or the fields asked for), the client's parse of it
(validated ``JobInfo``s or records) and sacct's lines of the default format. Each job
ran one step; prints one JSON object::

    python bench/sacct_path.py [J]                                # 20000
    PYTHONPATH=/path/to/other/tree/src python bench/sacct_path.py
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from pydantic import TypeAdapter

from hal.api.convert import job_info
from hal.compat import sacct
from hal.core.clock import VirtualClock
from hal.core.states import JobState
from hal.state.memory_store import MemoryStateStore
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store
from hal.wire.jobs import JobInfo, JobList, StepRecord


def _cpu(out: dict[str, object], name: str, work: Any) -> Any:
    t = time.process_time()
    value = work()
    out[name] = round(time.process_time() - t, 3)
    return value


def main(count: int) -> dict[str, object]:
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    now = clock.now()
    store(
        cluster,
        *[
            make_job(i)
            .running_on(f"e{i % 100}", start=now - 600)
            .build()
            .evolve(state=JobState.COMPLETED, end_time=now - 60)
            for i in range(1, count + 1)
        ],
    )
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    out: dict[str, object] = {"jobs": count}
    step = StepRecord(
        step_id=0, name="sh", nodelist="e1", ntasks=1, state="COMPLETED", exit_code=0,
        start_time=now - 590, end_time=now - 70, max_rss_bytes=1 << 20, max_rss_node="e1",
        ave_rss_bytes=1 << 20, total_cpu_seconds=5.0,
    )  # fmt: skip
    infos = _cpu(out, "server_infos_s", lambda: [job_info(j, cluster) for j in jobs])
    for info in infos:
        info.steps.append(step)
        info.eligible_time = now - 700  # (eligible in today's window, sacct's default)
    adapter = TypeAdapter(JobList)
    body = _cpu(out, "server_json_s", lambda: adapter.dump_json(JobList(jobs=infos)))
    out["bytes"] = len(body)
    request = sacct.parse_request(["-a"], now, None)
    assert request is not None
    asking = getattr(sacct, "request_fields", None)
    if asking is not None:  # (this tree asks for the fields its format reads)
        names = asking(request)
        out["fields"] = len(names)
        include = {"jobs": {"__all__": set(names)}}
        body = _cpu(
            out, "server_json_s", lambda: adapter.dump_json(JobList(jobs=infos), include=include)
        )
        out["bytes"] = len(body)
        from hal.client.records import records

        listed: list[JobInfo] = _cpu(out, "client_parse_s", lambda: records(body).jobs)
    else:
        listed = _cpu(out, "client_parse_s", lambda: JobList.model_validate_json(body).jobs)
    listed = sorted(listed, key=lambda j: j.id)
    lines = _cpu(out, "client_lines_s", lambda: sacct.sacct_lines(request, listed, now))
    out["lines"] = len(lines)
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)))
