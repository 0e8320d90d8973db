"""Whether a waiting job gets new nodes, and from which group: pure functions, no I/O.

A job gets new nodes only when waiting for the capacity already there would take longer
than making nodes: its expected start there (the planner's forecast with learned run
times, ``squeue --start``) is later than now + the group's boot time + the job's
patience (``--burst-after``; ``never``: no new nodes for it). ``[cloud]
pending_seconds`` stays a floor: no job gets nodes before it has waited that long.

Among the groups that pass that test, the job goes where it is expected to cost least
to finish (SkyPilot's optimizer, with HAL's learned run times):

- the nodes' price × (boot + predicted run time) × nodes;
- on interruptible capacity (``market = "spot"``), the chance that one of its nodes is
  taken back during the run (``interruption_rate`` per node-hour, a Poisson process) ×
  the work that would be lost then × the price: up to its checkpoint interval when the
  job checkpoints (its ``--signal``, or a stated interval), else the run so far;
- moving its ``--data`` inputs to the group's nodes (the data plane's per-edge costs
  from the cache holding them, plus the group's ``egress_per_gb``), computed by the
  caller and passed in as a number.

Used by the server's autoscaler (``hal.server.cloud``) and the simulator
(``hal.sim.cloud``), so that what is measured is what runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from hal.core.node_groups import SPOT, NodeGroup

NEVER = math.inf  # --burst-after=never: this job gets no new nodes


@dataclass(frozen=True, slots=True)
class Offer:
    """What one group's new nodes would cost a job, and when they could start it."""

    group: str
    nodes: int
    ready_at: float  # now + the group's boot time
    run_cost: float  # price × (boot + predicted run time) × nodes
    interruption_cost: float  # spot: P(interruption) × lost work × price × nodes
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


def expected_loss_s(
    rate_per_hour: float, nodes: int, runtime_s: float, checkpoint_s: float = 0.0
) -> float:
    """The run time an interruption is expected to cost, given that one comes during the
    run: half a checkpoint interval when the job checkpoints (``checkpoint_s`` > 0; at
    most half the run), else the run so far (the mean of an exponential arrival cut at
    the run's end)."""
    if runtime_s <= 0:
        return 0.0
    if checkpoint_s > 0:
        return min(checkpoint_s, runtime_s) / 2.0
    r = rate_per_hour * max(nodes, 1) / 3600.0
    x = r * runtime_s
    if x < 1e-9:
        return runtime_s / 2.0
    # E[t | t < T] for t ~ Exp(r): 1/r - T e^{-rT} / (1 - e^{-rT})
    return 1.0 / r - runtime_s / math.expm1(x)


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
) -> Offer:
    """The expected cost of running a job of ``nodes`` nodes for ``runtime_s`` on new
    nodes of ``group`` (``boot_s``: its expected boot time, default ``boot_seconds``)."""
    boot = boot_seconds(group) if boot_s is None else boot_s
    nodes = max(nodes, 1)
    price = group.price_per_hour
    run_cost = price * nodes * (boot + runtime_s) / 3600.0
    p = 0.0
    lost_cost = 0.0
    if group.market == SPOT:
        p = interruption_probability(group.interruption_rate, nodes, runtime_s)
        lost = expected_loss_s(group.interruption_rate, nodes, runtime_s, checkpoint_s)
        # the lost run is paid again, and a new node boots for it
        lost_cost = p * price * nodes * (lost + boot) / 3600.0
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
) -> Decision:
    """Whether the job gets new nodes, and from which of ``offers`` (each group that can
    hold it, in config order). A group may open nodes for it when the job has waited
    ``floor_s`` (``[cloud] pending_seconds``), its patience is not ``never``, and its
    ``expected_start`` on the capacity already there (None: none known, as for a job no
    node there can hold) is later than that group's ``ready_at + patience_s``. Of those,
    the lowest expected cost to finish wins (ties: the earlier ready, then config
    order)."""
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
    usable = [o for o in ranked if o.soon_enough]
    if not usable:
        assert expected_start is not None
        return made(
            None,
            f"expected to start here at +{expected_start - now:.0f} s, no later than a new "
            f"node's boot + its patience ({patience_s:g} s)",
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
    burst_after_s: float | None,
    qos: str | None,
    partition: str,
    by_qos: Sequence[tuple[str, float]] | dict[str, float],
    by_partition: Sequence[tuple[str, float]] | dict[str, float],
    default_s: float,
) -> float:
    """A job's patience: its own ``--burst-after`` (``JobSpec.burst_after_s``, -1:
    never), else its QoS's, else its partition's default (``[cloud] burst_after_by_qos``
    / ``burst_after_by_partition``), else ``[cloud] burst_after``."""
    if burst_after_s is not None:
        return NEVER if burst_after_s < 0 else burst_after_s
    q = dict(by_qos)
    if qos is not None and qos in q:
        return q[qos]
    p = dict(by_partition)
    if partition in p:
        return p[partition]
    return default_s


def parse_duration(text: str, *, field: str = "burst-after") -> float:
    """``--burst-after`` and the config's values: ``never``, seconds (``90``), ``10m``,
    ``2h``, ``1d`` or ``HH:MM:SS``."""
    from hal.core.errors import InvalidRequest

    t = text.strip().lower()
    if t == "never":
        return NEVER
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    try:
        if t and t[-1] in units:
            value = float(t[:-1]) * units[t[-1]]
        elif ":" in t:
            parts = [float(x) for x in t.split(":")]
            if len(parts) > 3:
                raise ValueError(t)
            value = 0.0
            for x in parts:
                value = value * 60 + x
        else:
            value = float(t)
    except ValueError:
        raise InvalidRequest(
            f"--{field} takes a duration like 90 (seconds), 10m, 2h, 1d or 01:30:00, or "
            f"never (got {text!r})",
            field=field.replace("-", "_"),
        ) from None
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(
            f"--{field} must be 0 or more, or never (got {text!r})",
            field=field.replace("-", "_"),
        )
    return value
