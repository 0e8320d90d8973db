"""Plots of a run (matplotlib, Agg backend: no display needed): wait-time CDF, queue
length and utilisation over time, wait by job size class; PNG files plus one HTML page."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import numpy as np

from hal.sim.engine import SimRun
from hal.sim.metrics import job_arrays

SIZE_CLASSES = ((1, 1), (2, 4), (5, 16), (17, 64), (65, 256), (257, 10**9))


def _label(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}"


def write_report(run: SimRun, summary: dict[str, Any], out: Path, exclude: float) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    a = job_arrays(run)
    n = len(run.outcomes)
    keep = ~np.isnan(a["start"])
    keep[: math.floor(n * exclude)] = False
    wait_min = a["wait"][keep] / 60.0
    pngs: list[str] = []

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = np.sort(wait_min)
    ax.plot(xs, np.arange(1, len(xs) + 1) / max(len(xs), 1))
    ax.set_xscale("symlog")
    ax.set_xlabel("wait (minutes)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Wait time CDF")
    ax.grid(alpha=0.3)
    pngs.append(_save(fig, out / "wait_cdf.png", plt))

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    days = (run.series_t - (run.series_t[0] if len(run.series_t) else 0.0)) / 86400.0
    ax1.step(days, run.series_queue, where="post", lw=0.6)
    ax1.set_ylabel("queued jobs")
    ax2.step(days, run.series_busy / max(run.machine_procs, 1), where="post", lw=0.6)
    ax2.set_ylabel("utilisation")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("days since the first submit")
    ax1.set_title("Queue length and utilisation over time")
    pngs.append(_save(fig, out / "queue_utilization.png", plt))

    fig, ax = plt.subplots(figsize=(7, 4))
    labels, means = [], []
    procs = a["procs"][keep]
    for lo, hi in SIZE_CLASSES:
        sel = (procs >= lo) & (procs <= hi)
        if sel.any():
            labels.append(_label(lo, hi))
            means.append(float(wait_min[sel].mean()))
    ax.bar(labels, means)
    ax.set_xlabel("job size (processors)")
    ax.set_ylabel("mean wait (minutes)")
    ax.set_title("Wait by job size class")
    pngs.append(_save(fig, out / "wait_by_size.png", plt))

    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in summary.items()
    )
    imgs = "".join(f'<p><img src="{p}" alt="{p}"></p>' for p in pngs)
    page = out / "index.html"
    page.write_text(
        "<!doctype html><meta charset=utf-8><title>HAL simulation report</title>"
        f"<h1>HAL simulation report</h1><table>{rows}</table>{imgs}\n",
        encoding="utf-8",
    )
    return page


def _save(fig: Any, path: Path, plt: Any) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name
