"""``hal explain JOB``: why a job is pending, in one place (``GET /v1/jobs/{id}/explain``)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from hal.client import HalClient
from hal.core.states import PendingReason

if TYPE_CHECKING:
    from hal.wire.priority import BurstInfo, ExplainInfo


def add_commands(sub: Any) -> None:
    p = sub.add_parser("explain", help="why is a job pending: reason, nodes, queue, priority")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="the REST object unchanged")
    p.set_defaults(func=cmd_explain)


HELD_REASONS = (PendingReason.JOB_HELD_USER.value, PendingReason.JOB_HELD_ADMIN.value)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "unknown"


def explain_lines(info: ExplainInfo) -> list[str]:
    lines = [f"job {info.display_id}: {info.state}, reason {info.reason}", f"  why: {info.detail}"]
    if info.feedback_action:
        lines.append(f"  feedback: {info.feedback_action}")
    if info.state != "PENDING":
        return lines
    if info.het_blocking_component is not None:
        lines.append(f"  het job: component {info.het_blocking_component} blocks every component")
    if info.nodes_total and not info.nodes_available and not info.rejections:
        # no node was judged: what holds the job (a dependency, a begin time) stopped it
        # before its nodes are looked at; "0/2 nodes available" read as if none could
        lines.append(f"  nodes: not looked at while {info.reason} holds it")
    elif info.nodes_total:
        lines.append(f"  nodes: {info.summary}")
        for r in info.rejections:
            lines.append(f"    {r.nodes:>6}  {r.reason}  [{r.plugin}]")
    if info.jobs_ahead:
        first = ", ".join(info.ahead_ids)
        lines.append(f"  queue: {info.jobs_ahead} job(s) ahead in its partition (first: {first})")
    else:
        lines.append("  queue: first in its partition")
    p = info.priority
    if p is not None:
        w = p.weighted
        fixed = " (set by an administrator)" if p.fixed else ""
        factors = (
            f"age {w.age:.0f} + fairshare {w.fairshare:.0f} + jobsize {w.job_size:.0f}"
            f" + partition {w.partition:.0f} + qos {w.qos:.0f} - nice {p.nice}"
        )
        if info.reason in HELD_REASONS:  # a hold is priority 0, as in Slurm
            lines.append(f"  priority: 0 (held; once released: {factors})")
        else:
            lines.append(f"  priority: {p.priority}{fixed} = {factors}")
    s = info.fairshare
    if s is not None:
        lines.append(
            f"  fair share: {s.user or '-'} in account {s.account}: factor {s.fairshare:.6f}"
            f" (norm shares {s.norm_shares:.6f}, effective usage {s.effective_usage:.6f})"
        )
    if info.expected_start is not None:
        why = "end of its --switches wait" if info.reason == "Topology" else "backfill plan"
        lines.append(f"  expected start: {_when(info.expected_start)} ({why})")
    elif info.earliest_start is not None:
        lines.append(
            f"  earliest start: {_when(info.earliest_start)} (ignoring the jobs queued ahead)"
        )
    else:
        lines.append("  expected start: unknown")
    if info.burst is not None:
        lines.extend(burst_lines(info.burst))
    return lines


def burst_lines(b: BurstInfo) -> list[str]:
    """The autoscaler's comparison ([cloud]): its expected start on the nodes there
    against each group's boot + its patience, and each group's expected cost."""
    here = "none known" if b.expected_start is None else _when(b.expected_start)
    patience = "never" if b.patience_seconds is None else f"{b.patience_seconds:g} s"
    chosen = b.group or "none (it waits)"
    lines = [
        f"  cloud: {chosen}: {b.why}",
        f"    expected start on the nodes there: {here}; patience {patience}; "
        f"predicted run {b.runtime_seconds:.0f} s",
    ]
    for o in b.offers:
        cost = "never finishes" if o.expected_cost < 0 else f"{o.expected_cost:.4g}"
        gate = "later than ready + patience" if o.soon_enough else "not later: waits"
        lines.append(
            f"    {o.group:<12} ready {_when(o.ready_at)} ({gate}); expected cost {cost}"
            f" = run {o.run_cost:.4g} + interruptions "
            f"{'-' if o.interruption_cost < 0 else f'{o.interruption_cost:.4g}'}"
            f" (p {o.p_interruption:.2f}) + data {o.data_cost:.4g}; {o.nodes} node(s)"
        )
    return lines


def cmd_explain(ns: argparse.Namespace) -> int:
    with HalClient() as hal:
        info = hal.explain(ns.job_id)
    if ns.json:
        print(info.model_dump_json(indent=2))
        return 0
    for line in explain_lines(info):
        print(line)
    return 0
