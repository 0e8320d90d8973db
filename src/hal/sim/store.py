"""Saving a run for ``hal sim report``: per-job arrays and the time series in one ``.npz``
with the summary as JSON inside (no pickle)."""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from hal.core.states import JobState
from hal.sim.engine import JobOutcome, SimRun
from hal.sim.swf import SwfRecord
from hal.sim.workload import TraceJob


def save_run(path: Path, run: SimRun, summary: dict[str, Any], exclude: float) -> None:
    with path.open("wb") as fh:
        np.savez_compressed(
            fh,
            submit=np.array([o.job.submit for o in run.outcomes]),
            start=np.array([o.start for o in run.outcomes]),
            end=np.array([o.end for o in run.outcomes]),
            procs=np.array([o.job.procs for o in run.outcomes]),
            ids=np.array([o.job.id for o in run.outcomes]),
            series_t=run.series_t,
            series_queue=run.series_queue,
            series_busy=run.series_busy,
            meta=np.frombuffer(
                json.dumps(
                    {"summary": summary, "exclude": exclude, "machine": run.machine_procs}
                ).encode(),
                dtype=np.uint8,
            ),
        )


def load_run(path: Path) -> tuple[SimRun, dict[str, Any], float]:
    """The run saved in ``path``. ``OSError`` when it cannot be opened, ``ValueError``
    when it is no whole run saved by ``save_run`` (another file, or one cut short)."""
    with path.open("rb") as fh:  # a missing file: its OSError
        if not zipfile.is_zipfile(fh):  # (numpy would try it as a pickle)
            raise ValueError("not a run saved by `hal sim run --save` (no .npz archive)")
    try:
        return _load(path)
    except (KeyError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        raise ValueError(f"not a run saved by `hal sim run --save` ({err})") from err


def _load(path: Path) -> tuple[SimRun, dict[str, Any], float]:
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(data["meta"].tobytes().decode())
        outcomes = []
        for jid, sub, st, en, pr in zip(
            data["ids"], data["submit"], data["start"], data["end"], data["procs"], strict=True
        ):
            rec = SwfRecord(int(jid), float(sub), -1, -1, int(pr), -1, -1, int(pr), -1, -1,
                            -1, -1, -1, -1, -1, -1, -1, -1)  # fmt: skip
            job = TraceJob(int(jid), float(sub), float(en - st), int(pr), -1.0, -1, rec)
            outcomes.append(JobOutcome(job, float(st), float(en), JobState.COMPLETED))
        run = SimRun(
            tuple(outcomes),
            int(meta["machine"]),
            data["series_t"],
            data["series_queue"],
            data["series_busy"],
            0,
            0,
            float(meta["summary"].get("wall_s", 0.0)),
        )
    return run, meta["summary"], float(meta["exclude"])
