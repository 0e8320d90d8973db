"""Whether a waiting job gets new nodes, and from which group: pure functions, no I/O.

A job gets new nodes only when waiting for the capacity already there would take longer
than making nodes: its expected start there (the planner's forecast with learned run
times, ``squeue --start``) is later than now + the group's boot time + the job's
patience (``--burst-after``; ``never``: no new nodes for it). ``[cloud]
pending_seconds`` stays a floor: no job gets nodes before it has waited that long.

Among the groups that pass that test, the job goes where it is expected to cost least
to finish (SkyPilot's optimizer, with HAL's learned run times):

- the nodes' price × (boot + predicted run time) × nodes;
- on interruptible capacity (``market = "spot"``), what interruptions are expected to
  add: one of its nodes taken back (``interruption_rate`` per node-hour, a Poisson
  process) loses the work since its last checkpoint (its ``--signal`` lets it
  checkpoint at the notice; else all of it), paid again with a new boot, as often as
  it comes (``expected_busy_s``);
- moving its ``--data`` inputs to the group's nodes (the data plane's per-edge costs
  from the cache holding them, plus the group's ``egress_per_gb``), computed by the
  caller and passed in as a number.

Used by the server's autoscaler (``hal.server.cloud``) and the simulator
(``hal.sim.cloud``), so that what is measured is what runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from hal.core.node_groups import SPOT, NodeGroup
from hal.core.patience import NEVER, Patience, parse_patience

# (the patience's type and parser live in hal.core.patience, where the configuration and
# the Slurm commands reach them; named here too, beside the decision that reads them)
__all__ = [
    "NEVER",
    "Decision",
    "Offer",
    "Patience",
    "boot_seconds",
    "decide",
    "expected_busy_s",
    "interruption_probability",
    "offer",
    "parse_patience",
    "patience",
]


@dataclass(frozen=True, slots=True)
class Offer:
    """What one group's new nodes would cost a job, and when they could start it."""

    group: str
    nodes: int
    ready_at: float  # now + the group's boot time
    run_cost: float  # price × (boot + predicted run time) × nodes
    interruption_cost: float  # spot: the lost work and boots expected, at its price
    data_cost: float  # moving its --data inputs there
    p_interruption: float  # the chance one of its nodes is taken back during the run
    soon_enough: bool = True  # the job's expected start is later than ready_at + patience

    @property
    def total(self) -> float:
        return self.run_cost + self.interruption_cost + self.data_cost


@dataclass(frozen=True, slots=True)
class Decision:
    """The burst decision for one job, with what it compared (``hal explain``)."""

    job_id: int
    now: float
    expected_start: float | None  # on the capacity already there (None: none known)
    patience_s: float
    runtime_s: float  # the predicted run time the costs are worked out with
    offers: tuple[Offer, ...]  # every group that can hold it, cheapest first
    group: str | None  # the group chosen; None: it waits for the capacity there
    why: str

    @property
    def costs(self) -> dict[str, float]:
        """group → expected cost to finish, of the groups it may open nodes in."""
        return {o.group: o.total for o in self.offers if o.soon_enough}


def interruption_probability(rate_per_hour: float, nodes: int, seconds: float) -> float:
    """The chance that at least one of ``nodes`` nodes is taken back within ``seconds``,
    each independently at ``rate_per_hour`` (a Poisson process)."""
    if rate_per_hour <= 0 or seconds <= 0:
        return 0.0
    return -math.expm1(-rate_per_hour * max(nodes, 1) * seconds / 3600.0)


def expected_busy_s(
    rate_per_hour: float,
    nodes: int,
    runtime_s: float,
    checkpoint_s: float = 0.0,
    boot_s: float = 0.0,
) -> float:
    """How long a job's nodes are expected to be held to finish ``runtime_s`` of work,
    boot included, when one of ``nodes`` nodes taken back (``rate_per_hour`` each) loses
    the work since its last checkpoint (every ``checkpoint_s``; 0: all of it) and the
    job starts again on new nodes, booting again: each piece of ``L`` seconds between
    checkpoints takes ``(e^{rL} - 1) / r`` with ``e^{rL} - 1`` interruptions on average
    (restarts from scratch, r the job's interruption rate per second). Infinite where
    the job would all but never finish."""
    if runtime_s <= 0:
        return boot_s
    r = rate_per_hour * max(nodes, 1) / 3600.0
    if r <= 0:
        return boot_s + runtime_s
    piece = min(checkpoint_s, runtime_s) if checkpoint_s > 0 else runtime_s
    pieces = runtime_s / piece
    x = r * piece
    if x > 50:
        return math.inf
    failures = pieces * math.expm1(x)
    return boot_s + pieces * math.expm1(x) / r + failures * boot_s


def boot_seconds(group: NodeGroup, observed: float | None = None) -> float:
    """The group's expected boot time: what its joins took (``observed``), else its
    configured ``boot_seconds``."""
    return observed if observed is not None and observed > 0 else group.boot_seconds


def offer(
    group: NodeGroup,
    nodes: int,
    runtime_s: float,
    now: float,
    *,
    boot_s: float | None = None,
    checkpoint_s: float = 0.0,
    data_cost: float = 0.0,
    risk_s: float | None = None,
) -> Offer:
    """The expected cost of running a job of ``nodes`` nodes for ``runtime_s`` on new
    nodes of ``group`` (``boot_s``: its expected boot time, default ``boot_seconds``):
    the nodes' price for the boot and the run; on spot, what the expected
    interruptions add (``expected_busy_s``: the work lost and paid again, the boots
    again), worked out over ``risk_s`` (default ``runtime_s``): a run time that errs
    long, as a time limit does, since the risk grows faster than the run."""
    boot = boot_seconds(group) if boot_s is None else boot_s
    nodes = max(nodes, 1)
    price = group.price_per_hour
    run_cost = price * nodes * (boot + runtime_s) / 3600.0
    p = 0.0
    lost_cost = 0.0
    if group.market == SPOT and group.interruption_rate > 0:
        rate = group.interruption_rate
        risk = runtime_s if risk_s is None else max(risk_s, runtime_s)
        p = interruption_probability(rate, nodes, risk)
        busy = expected_busy_s(rate, nodes, risk, checkpoint_s, boot)
        lost_cost = price * nodes * (busy - boot - risk) / 3600.0
    return Offer(group.name, nodes, now + boot, run_cost, lost_cost, data_cost, p)


def decide(
    job_id: int,
    now: float,
    *,
    waited_s: float,
    expected_start: float | None,
    patience_s: float,
    floor_s: float,
    runtime_s: float,
    offers: Iterable[Offer],
    forecast_due: bool = False,
) -> Decision:
    """Whether the job gets new nodes, and from which of ``offers`` (each group that can
    hold it, in config order). A group may open nodes for it when the job has waited
    ``floor_s`` (``[cloud] pending_seconds``), its patience is not ``never``, and its
    ``expected_start`` on the capacity already there (None: none known, as for a job no
    node there can hold) is later than that group's ``ready_at + patience_s``. Of those,
    the lowest expected cost to finish wins (ties: the earlier ready, then config
    order). ``forecast_due``: the scheduler has not forecast the job yet, so a None
    ``expected_start`` says nothing yet: it waits for the next pass."""
    judged = []
    for o in offers:
        later = expected_start is None or expected_start > o.ready_at + patience_s
        judged.append(replace(o, soon_enough=later))
    ranked = tuple(
        o for _, o in sorted(enumerate(judged), key=lambda x: (x[1].total, x[1].ready_at, x[0]))
    )

    def made(group: str | None, why: str) -> Decision:
        return Decision(job_id, now, expected_start, patience_s, runtime_s, ranked, group, why)

    if not ranked:
        return made(None, "no group can hold it")
    if patience_s == NEVER:
        return made(None, "--burst-after=never")
    if waited_s < floor_s:
        return made(None, f"waited {waited_s:.0f} s of [cloud] pending_seconds {floor_s:g}")
    if forecast_due:
        return made(None, "its expected start here is not worked out yet")
    usable = [o for o in ranked if o.soon_enough and math.isfinite(o.total)]
    if not usable:
        return made(
            None,
            "no group would finish it (spot taken back too often)"
            if expected_start is None or any(o.soon_enough for o in ranked)
            else f"expected to start here at +{expected_start - now:.0f} s, no later than "
            f"a new node's boot + its patience ({patience_s:g} s)",
        )
    best = usable[0]
    where = "none known" if expected_start is None else f"+{expected_start - now:.0f} s"
    return made(
        best.group,
        f"expected start here {where} is later than {best.group}'s boot "
        f"(+{best.ready_at - now:.0f} s) + patience {patience_s:g} s; cheapest expected "
        f"cost {best.total:.4g}",
    )


def patience(
    own: str,
    qos: str | None,
    partition: str,
    by_qos: Mapping[str, Patience],
    by_partition: Mapping[str, Patience],
    default: Patience,
) -> Patience:
    """A job's patience: its own ``--burst-after`` (``JobSpec.burst_after``, checked at
    submit), else its QoS's, else its partition's default (``[cloud]
    burst_after_by_qos`` / ``burst_after_by_partition``), else ``[cloud]
    burst_after``."""
    if own:
        return parse_patience(own)
    if qos is not None and qos in by_qos:
        return by_qos[qos]
    if partition in by_partition:
        return by_partition[partition]
    return default
