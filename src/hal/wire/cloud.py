"""The compute control plane's state (REST ``GET /v1/cloud``, ``hal cloud``)."""

from __future__ import annotations

from pydantic import Field

from hal.wire.base import WireModel


class CloudNodeInfo(WireModel):
    node: str
    instance: str  # the provider's id (EC2's instance id; the local provider's pid)
    state: str  # booting (its agent has not joined), joined, idle, or stopping
    created_at: float
    idle_since: float | None = None  # when it last ran a job (None: it runs one, or booting)


class CloudGroupInfo(WireModel):
    name: str
    provider: str
    nodes: list[str]  # every name the group may use
    cpus: int
    memory_bytes: int
    gpus: int = 0
    gpu_type: str = ""
    features: list[str] = Field(default_factory=list)
    price_per_hour: float = 0.0
    idle_seconds: float
    boot_timeout_seconds: float
    instances: list[CloudNodeInfo] = Field(default_factory=list)
    resting_until: float | None = None  # after a failure, nothing is created till then
    last_error: str = ""
    # its provider failed or did not answer (last_error says how); a capacity answer
    # leaves it healthy; healthy again once a listing succeeds
    healthy: bool = True
    unhealthy_since: float | None = None
    created: int = 0  # nodes created since the server started
    removed: int = 0
    boot_failures: int = 0
    # taken out of [cloud]: its nodes are drained and removed as they free up
    retiring: bool = False


class CloudStatus(WireModel):
    interval_seconds: float = 0.0
    pending_seconds: float = 0.0
    groups: list[CloudGroupInfo] = Field(default_factory=list)  # none: no [cloud] groups


class CloudPrice(WireModel):
    """A group's price an hour as the autoscaler uses it (``hal cloud prices``)."""

    group: str
    price_per_hour: float
    currency: str = "USD"
    # where it came from: "config" (the group's price_per_hour), or the provider's price
    # list as it names it (e.g. "ec2 spot price history (eu-west-1a)")
    source: str
    observed_at: float  # when the provider gave it (or the server started, for "config")
    age_seconds: float
    # the last reading failed: the price above is the one before (its age shows it)
    error: str = ""


class CloudPrices(WireModel):
    price_interval_seconds: float = 0.0
    prices: list[CloudPrice] = Field(default_factory=list)


class CloudCost(WireModel):
    """What one user's jobs in one account cost on cloud capacity (``hal cloud costs``)."""

    account: str
    user: str
    cost: float  # in ``currency``: the runs that ended since ``since``, and so far of those running
    runs: int  # the runs counted (a requeued job's each)
    running: int = 0  # of them, still running


class CloudBudgetInfo(WireModel):
    """One ``cloud_budget`` and where it stands (``hal cloud costs``)."""

    holder: str  # "account physics", "QoS high"
    limit: float
    currency: str = "USD"
    period: str  # day, week or month
    since: float  # the period's start (UTC)
    spent: float  # its runs' cost in the period, so far
    committed: float = 0.0  # what the nodes being made for waiting jobs are expected to cost
    waiting: int = 0  # jobs it keeps from new nodes (CloudBudget)


class CloudCosts(WireModel):
    since: float
    until: float
    currency: str = "USD"
    total: float = 0.0
    costs: list[CloudCost] = Field(default_factory=list)  # by account, then user
    budgets: list[CloudBudgetInfo] = Field(default_factory=list)
