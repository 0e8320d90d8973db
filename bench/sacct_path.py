"""What ``sacct`` of J ended jobs costs in CPU seconds, in one process (so a loaded
machine's figures compare): the server's answer of the history with every field (each
job's ``job_info``, its steps and the JSON) and with the fields sacct's default format
asks for (what ``sacct`` gets: ``hal.api.job_list.history_body``, each field worked out
alone, where the tree has it; else ``job_info`` of each job and the JSON of those
fields), the client's parse of the latter (records) and sacct's lines of the default
format. Each job ran one step; prints one JSON object::

    python bench/sacct_path.py [J]                                # 20000
    PYTHONPATH=/path/to/other/tree/src python bench/sacct_path.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from pydantic import TypeAdapter

from hal.api import job_list
from hal.api.convert import job_info
from hal.client.records import records
from hal.compat import sacct
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store
from hal.wire.jobs import JobInfo, JobList, StepRecord

_LIST: TypeAdapter[JobList] = TypeAdapter(JobList)


def _cpu(out: dict[str, object], name: str, work: Any) -> Any:
    t = time.process_time()
    value = work()
    out[name] = round(time.process_time() - t, 3)
    return value


def _infos(jobs: list[Job], cluster: Cluster, step: StepRecord) -> list[JobInfo]:
    """Each job's whole ``JobInfo`` with its step, as history's answer without
    ``fields=`` builds them."""
    infos = [job_info(j, cluster) for j in jobs]
    for info in infos:
        info.steps = [step]
    return infos


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
            .evolve(
                state=JobState.COMPLETED,
                end_time=now - 60,
                eligible_time=now - 700,  # (eligible in today's window, sacct's default)
            )
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
    full = _cpu(
        out, "server_full_s", lambda: _LIST.dump_json(JobList(jobs=_infos(jobs, cluster, step)))
    )
    out["full_bytes"] = len(full)
    request = sacct.parse_request(["-a"], now, None)
    assert request is not None
    names = frozenset(sacct.request_fields(request))
    out["fields"] = len(names)
    history_body = getattr(job_list, "history_body", None)
    if history_body is not None:  # (this tree works out each field asked for alone)
        steps = {j.id: [step] for j in jobs}
        body = _cpu(
            out,
            "server_fields_s",
            lambda: asyncio.run(history_body(jobs, cluster, names, False, steps, {})),
        )
    else:
        include = {"jobs": {"__all__": set(names)}}
        body = _cpu(
            out,
            "server_fields_s",
            lambda: _LIST.dump_json(JobList(jobs=_infos(jobs, cluster, step)), include=include),
        )
    out["fields_bytes"] = len(body)
    listed: list[JobInfo] = _cpu(out, "client_parse_s", lambda: records(body).jobs)
    listed = sorted(listed, key=lambda j: j.id)
    lines = _cpu(out, "client_lines_s", lambda: sacct.sacct_lines(request, listed, now))
    out["lines"] = len(lines)
    return out


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)))
