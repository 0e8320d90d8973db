"""QoS and account limits: a job starts only if it keeps every limit of its QoS and of
its account and every ancestor account (``AccountingStorageEnforce=limits``).

Usage is counted once per pass from the snapshot's running jobs (``ctx.running``) and
kept in ``ctx.data``; Reserve adds each job placed in the pass (with its real
allocation), Unreserve takes it out again. PreFilter then checks a job in O(depth of its
account) dictionary look-ups, so 50,000 pending jobs cost little. A job held by a limit
is UNSCHEDULABLE at PreFilter: it waits with the limit's reason and holds nobody back.

Reserve checks once more with the allocation the job really got (``--exclusive`` or
``--mem=0`` can get more than the request): a limit is never exceeded.

Cohorts (like Kueue's): accounts that name the same ``cohort`` lend each other the
GrpTRES they leave unused. An account may go above its own GrpTRES (by at most its
``borrow_limit``) while what all members use above their own GrpTRES stays within what
the others leave unused; the preemption plugin takes lent quota back for its owner.

PreFilter runs for most pending jobs of every pass, so what it needs is worked out once:
the verdicts (Status objects, messages included) when the plugin is built, and per pass
a job's limited QoS and accounts per (account, user, QoS) and its request per placement
key (``framework.keys.PLACEMENT_KEY``: the request's every field is in it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from hal.core.job import Allocation, Job
from hal.core.priority import (
    DEFAULT_QOS,
    ROOT_ACCOUNT,
    PriorityPolicy,
    TresLimits,
    account_chains,
    charged_account,
)
from hal.core.states import PendingReason as R
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import PreFilterPlugin, ReservePlugin
from hal.scheduler.framework.keys import MAX_NODES, PLACEMENT_KEY
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import PlacementKey
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable
from hal.scheduler.plugins.limits.perjob import (
    AccountPerJob,
    over_max_wall,
    per_job_caps,
    whole_node_memory_over,
)

NAME = "limits"

# (cpus, gpus, memory bytes, nodes)
Tres = tuple[int, int, int, int]
_QOS_GRP = (R.QOS_GRP_CPU, R.QOS_GRP_GRES, R.QOS_GRP_MEM, R.QOS_GRP_NODE)
_QOS_PER_JOB = (
    R.QOS_MAX_CPU_PER_JOB,
    R.QOS_MAX_GRES_PER_JOB,
    R.QOS_MAX_MEM_PER_JOB,
    R.QOS_MAX_NODE_PER_JOB,
)
_ASSOC_GRP = (R.ASSOC_GRP_CPU, R.ASSOC_GRP_GRES, R.ASSOC_GRP_MEM, R.ASSOC_GRP_NODE)
_TRES_NAMES = ("cpu", "gres/gpu", "mem", "node")


@dataclass(slots=True)
class Usage:
    """What running jobs (snapshot + placed this pass) hold, per limited QoS/account."""

    qos_user_jobs: Counter[tuple[str, str]] = field(default_factory=Counter)
    qos_jobs: Counter[str] = field(default_factory=Counter)
    qos_tres: dict[str, list[int]] = field(default_factory=dict)
    acct_user_jobs: Counter[tuple[str, str]] = field(default_factory=Counter)
    acct_jobs: Counter[str] = field(default_factory=Counter)
    acct_tres: dict[str, list[int]] = field(default_factory=dict)


USAGE: StateKey[Usage] = StateKey("limits.usage")
# the job's share as Reserve added it (Unreserve takes exactly that out, once)
RESERVED: StateKey[tuple[str, tuple[str, ...], Tres]] = StateKey("limits.reserved")


Caps = tuple[tuple[int, int], ...]  # (resource index, cap) for the capped resources
Keys = tuple[str, tuple[str, ...]]  # limited QoS ("" if none), limited accounts


@dataclass(slots=True)
class _Pass:
    """PreFilter's per-pass tables."""

    keys: dict[tuple[str | None, str, str | None], Keys] = field(default_factory=dict)
    tres: dict[PlacementKey, Tres] = field(default_factory=dict)


def _held(reason: R, message: str) -> Status:
    return unschedulable(reason, message, NAME)


def _caps(limits: TresLimits) -> Caps:
    return tuple((i, cap) for i, cap in enumerate(limits.vector) if cap is not None)


def _over(used: list[int] | None, want: Tres, caps: Caps) -> int | None:
    """The index of the first resource ``want`` would take over its cap, or None."""
    for i, cap in caps:
        if (used[i] if used else 0) + want[i] > cap:
            return i
    return None


def _add(table: dict[str, list[int]], key: str, tres: Tres, sign: int) -> None:
    row = table.setdefault(key, [0, 0, 0, 0])
    for i in range(4):
        row[i] += sign * tres[i]


def request_tres(job: Job, nodes: int | None = None) -> Tres:
    """What a pending job asks for at its minimum node count, or on ``nodes`` nodes
    (``--mem=0``: 0 memory here; Reserve counts what it really gets)."""
    spec = job.spec
    n = max(spec.nodes_min, 1) if nodes is None else nodes
    per = spec.request_per_node(n)
    return (per.cpus * n, per.gpus * n, per.memory_bytes * n, n)


def allocation_tres(allocation: Allocation) -> Tres:
    total = allocation.total()
    return (total.cpus, total.gpus, total.memory_bytes, len(allocation.nodes))


class Limits:
    """Built from the config's accounts, users and QoS; stateless between passes."""

    name = NAME

    def __init__(self, policy: PriorityPolicy) -> None:
        self._qos = {q.name: q for q in policy.qos if q.has_limits}
        self._accounts = {a.name: a for a in policy.accounts}
        self._defaults = policy.default_accounts
        self._qos_caps = {q.name: _caps(q.grp_tres) for q in self._qos.values()}
        self._acct_caps = {a.name: _caps(a.grp_tres) for a in policy.accounts}
        self._per_job_acct = AccountPerJob.of(policy.accounts)  # MaxTRES, MaxWall (or None)
        # cohorts: account → every member of its cohort (itself included), and how much
        # above its own GrpTRES it may go (None: as much as the others leave unused)
        cohorts: dict[str, list[str]] = {}
        for a in policy.accounts:
            if a.cohort:
                cohorts.setdefault(a.cohort, []).append(a.name)
        self._cohort = {a.name: tuple(cohorts[a.cohort]) for a in policy.accounts if a.cohort}
        self._borrow = {a.name: a.borrow_limit.vector for a in policy.accounts}
        self._cap_vector = {a.name: a.grp_tres.vector for a in policy.accounts}
        # account → itself and its ancestors that have a limit, leaf first
        self._chains = {ROOT_ACCOUNT: (), **account_chains(policy.accounts, lambda a: a.has_limits)}
        # every usage verdict, made once: the messages name only configured values
        qos_held = {
            q.name: (
                _held(
                    R.QOS_MAX_JOBS_PER_USER, f"MaxJobsPerUser {q.max_jobs_per_user} of QoS {q.name}"
                ),
                _held(R.QOS_GRP_JOBS, f"GrpJobs {q.grp_jobs} of QoS {q.name}"),
                tuple(
                    _held(_QOS_GRP[i], f"GrpTRES {_TRES_NAMES[i]} of QoS {q.name}")
                    for i in range(4)
                ),
            )
            for q in self._qos.values()
        }
        acct_held = {
            a.name: (
                _held(R.ASSOC_MAX_JOBS, f"MaxJobs {a.max_jobs} of account {a.name}"),
                _held(R.ASSOC_GRP_JOBS, f"GrpJobs {a.grp_jobs} of account {a.name}"),
                tuple(
                    _held(_ASSOC_GRP[i], f"GrpTRES {_TRES_NAMES[i]} of account {a.name}")
                    for i in range(4)
                ),
            )
            for a in policy.accounts
        }
        # per QoS and account, what ``_usage_check`` tests: (MaxJobsPerUser or MaxJobs,
        # GrpJobs, GrpTRES caps, the verdicts of those three)
        self._qos_tests = {
            q.name: (q.max_jobs_per_user, q.grp_jobs, self._qos_caps[q.name], qos_held[q.name])
            for q in self._qos.values()
        }
        self._acct_tests = {
            a.name: (a.max_jobs, a.grp_jobs, self._acct_caps[a.name], acct_held[a.name])
            for a in policy.accounts
        }
        # MaxTRESPerJob: (resource index, cap, reason) per capped resource, in test order
        self._per_job_caps = {
            q.name: per_job_caps(q.max_tres_per_job, _QOS_PER_JOB) for q in self._qos.values()
        }
        # QoS with a per-job limit (MaxWall, MaxTRESPerJob): the others skip that test
        self._per_job = {
            q.name
            for q in self._qos.values()
            if q.max_wall_s is not None or self._per_job_caps[q.name]
        }
        # this instance's per-pass tables (another instance may have another policy)
        self._pass_key: StateKey[_Pass] = StateKey(f"limits.pass.{id(self)}")

    @property
    def active(self) -> bool:
        """Some limit is configured (else the plugin passes every job)."""
        return bool(self._qos) or any(self._chains.values())

    def account_of(self, job: Job) -> str:
        """The account a job is charged to (as fair share charges it)."""
        return charged_account(job.spec.account, job.spec.user, self._accounts, self._defaults)

    def _keys(self, job: Job) -> tuple[str, tuple[str, ...]]:
        """The job's limited QoS ("" when its QoS has no limit) and limited accounts."""
        qos = job.spec.qos or DEFAULT_QOS
        return (qos if qos in self._qos else "", self._chains.get(self.account_of(job), ()))

    def _charge(
        self, usage: Usage, job: Job, qos: str, chain: Iterable[str], tres: Tres, sign: int
    ) -> None:
        user = job.spec.user
        if qos:
            usage.qos_user_jobs[(qos, user)] += sign
            usage.qos_jobs[qos] += sign
            _add(usage.qos_tres, qos, tres, sign)
        for acct in chain:
            usage.acct_user_jobs[(acct, user)] += sign
            usage.acct_jobs[acct] += sign
            _add(usage.acct_tres, acct, tres, sign)

    def usage(self, ctx: PassContext) -> Usage:
        """The pass's usage table, counted from ``ctx.running`` on first use."""
        usage = ctx.data.get(USAGE)
        if usage is None:
            usage = self.usage_of(ctx.running)
            ctx.data.write(USAGE, usage)
        return usage

    def usage_of(self, running: Iterable[Job]) -> Usage:
        """What ``running`` jobs hold against each limited QoS and account (also what
        ``GET /v1/limits`` shows)."""
        usage = Usage()
        for job in running:
            if not job.state.is_active or job.allocation is None:
                continue
            qos, chain = self._keys(job)
            if qos or chain:
                self._charge(usage, job, qos, chain, allocation_tres(job.allocation), 1)
        return usage

    def check(
        self,
        usage: Usage,
        job: Job,
        tres: Tres,
        keys: tuple[str, tuple[str, ...]],
        *,
        per_job: bool = True,
    ) -> Status:
        """SUCCESS if ``job`` holding ``tres`` more keeps every limit, else the first
        limit it breaks (QoS before account, the account before its ancestors).
        ``keys``: the job's ``_keys``."""
        qos_name, chain = keys
        if qos_name and per_job:
            st = self._per_job_check(qos_name, job, tres)
            if st is not None:
                return st
        return self._usage_check(usage, job, qos_name, chain, tres, per_job)

    def _per_job_check(self, qos_name: str, job: Job, tres: Tres) -> Status | None:
        """QoS ``qos_name``'s MaxWall and MaxTRESPerJob verdict (None: within them)."""
        qos = self._qos[qos_name]
        wall = qos.max_wall_s
        if wall is not None and over_max_wall(job, wall):
            return _held(R.QOS_MAX_WALL_PER_JOB, f"time limit above MaxWall {wall}s")
        for i, cap, reason in self._per_job_caps[qos_name]:
            if tres[i] > cap:
                return _held(reason, f"{tres[i]} asked, MaxTRESPerJob {cap}")
        return None

    def _usage_check(
        self,
        usage: Usage,
        job: Job,
        qos_name: str,
        chain: tuple[str, ...],
        tres: Tres,
        per_job: bool,
    ) -> Status:
        """The limits on usage (``check`` less the QoS's MaxWall and MaxTRESPerJob),
        tested in ``check``'s order: the QoS's MaxJobsPerUser, GrpJobs, GrpTRES; with
        ``per_job`` the accounts' MaxWall and MaxTRES (``perjob``); then per account of
        the chain its MaxJobs, GrpJobs, GrpTRES."""
        user = job.spec.user
        if qos_name:
            per_user, grp_jobs, caps, held = self._qos_tests[qos_name]
            if per_user is not None and usage.qos_user_jobs[(qos_name, user)] >= per_user:
                return held[0]
            if grp_jobs is not None and usage.qos_jobs[qos_name] >= grp_jobs:
                return held[1]
            if caps:
                i = _over(usage.qos_tres.get(qos_name), tres, caps)
                if i is not None:
                    return held[2][i]
        if per_job and self._per_job_acct is not None:
            found = self._per_job_acct.check(job, tres, chain)
            if found is not None:
                return _held(*found)
        for name in chain:
            max_jobs, grp_jobs, caps, held = self._acct_tests[name]
            if max_jobs is not None and usage.acct_user_jobs[(name, user)] >= max_jobs:
                return held[0]
            if grp_jobs is not None and usage.acct_jobs[name] >= grp_jobs:
                return held[1]
            if caps:
                i = self._account_over(usage, name, tres)
                if i is not None:
                    return held[2][i]
        return SUCCESS

    # -- cohorts, for the preemption plugin's reclaim ---------------------------------
    def lender_of(self, job: Job) -> str | None:
        """The account of ``job``'s chain that belongs to a cohort, or None."""
        for name in self._keys(job)[1]:
            if name in self._cohort:
                return name
        return None

    def cohort_of(self, name: str) -> tuple[str, ...]:
        return self._cohort.get(name, ())

    def borrowing(self, usage: Usage, name: str) -> bool:
        """Account ``name`` uses more than its own GrpTRES of some resource."""
        row = usage.acct_tres.get(name)
        return row is not None and any(row[k] > cap for k, cap in self._acct_caps[name])

    def within_own(self, usage: Usage, name: str, tres: Tres) -> bool:
        """``tres`` more keeps account ``name`` within its own GrpTRES."""
        return _over(usage.acct_tres.get(name), tres, self._acct_caps[name]) is None

    def _account_over(self, usage: Usage, name: str, tres: Tres) -> int | None:
        """The first resource ``tres`` would take account ``name`` over its GrpTRES, or
        None. In a cohort the account may go above its own GrpTRES (by at most its
        borrow limit) as long as what all members use above their own GrpTRES stays
        within what the others leave unused: quota is lent, never created."""
        i = _over(usage.acct_tres.get(name), tres, self._acct_caps[name])
        members = self._cohort.get(name)
        if i is None or members is None:
            return i
        table = usage.acct_tres
        for k, cap in self._acct_caps[name]:
            used = table.get(name)
            need = (used[k] if used else 0) + tres[k]
            if need <= cap:
                continue
            extra = self._borrow[name][k]
            if extra is not None and need > cap + extra:
                return k
            borrowed = lent = 0
            for m in members:
                m_cap = self._cap_vector[m][k]
                if m_cap is None:
                    continue  # lends nothing of this resource
                row = table.get(m)
                m_used = need if m == name else (row[k] if row else 0)
                borrowed += max(0, m_used - m_cap)
                lent += max(0, m_cap - m_used)
            if borrowed > lent:
                return k
        return None

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        """``check`` with the job's request, from the pass's tables."""
        data = ctx.data
        tables = data.get(self._pass_key)
        if tables is None:
            tables = _Pass()
            data.write(self._pass_key, tables)
        spec = job.spec
        who = (spec.account, spec.user, spec.qos)
        keys = tables.keys.get(who)
        if keys is None:
            keys = tables.keys[who] = self._keys(job)
        qos_name, chain = keys
        if not qos_name and not chain:
            return SUCCESS
        key = state.get(PLACEMENT_KEY)
        known = tables.tres.get(key) if key is not None else None
        if known is not None:
            tres = known
        else:
            tres = request_tres(job)
            if key is not None:  # (None: called outside the runtime)
                tables.tres[key] = tres
        if qos_name in self._per_job:
            st = self._per_job_check(qos_name, job, tres)
            if st is not None:
                return st
        usage = data.get(USAGE)
        if usage is None:
            usage = self.usage(ctx)
        st = self._usage_check(usage, job, qos_name, chain, tres, True)
        if spec.nodes_max > max(spec.nodes_min, len(spec.nodelist), 1) and st.is_success:
            self._cap_nodes(state, usage, job, keys)
        return st

    def _cap_nodes(self, state: CycleState, usage: Usage, job: Job, keys: Keys) -> None:
        """A node range (``-N 1-4``) that fits the limits at its minimum: the most nodes
        within them (their CPUs, memory and GPUs too, which grow with the count), for
        the runtime's node-count search (``MAX_NODES``), as Slurm caps a job's node
        range by its limits. Without the cap the runtime took the most nodes free: a
        per-job limit was exceeded, and a group limit refused that placement at Reserve
        in every pass, so the job never started."""
        spec = job.spec
        lo = max(spec.nodes_min, len(spec.nodelist), 1)
        qos_name, chain = keys
        n = spec.nodes_max
        while n > lo:
            tres = request_tres(job, n)
            if (
                qos_name not in self._per_job or self._per_job_check(qos_name, job, tres) is None
            ) and self._usage_check(usage, job, qos_name, chain, tres, True).is_success:
                break
            n -= 1
        if n < spec.nodes_max:
            state.write(MAX_NODES, n)

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        qos, chain = self._keys(job)
        if not qos and not chain:
            return SUCCESS
        usage = self.usage(ctx)
        tres = allocation_tres(allocation)
        st = self.check(usage, job, tres, (qos, chain), per_job=False)
        if not st.is_success:
            return st
        if job.spec.memory_per_node_bytes == 0:  # --mem=0: its memory is known only now
            accounts = [self._accounts[name] for name in chain]
            held = whole_node_memory_over(job, tres[2], self._qos.get(qos), accounts)
            if held is not None:
                return _held(*held)
        self._charge(usage, job, qos, chain, tres, 1)
        state.write(RESERVED, (qos, chain, tres))
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        added = state.get(RESERVED)
        if added is None:
            return
        state.delete(RESERVED)
        qos, chain, tres = added
        self._charge(self.usage(ctx), job, qos, chain, tres, -1)


def new(args: PluginArgs, policy: PriorityPolicy | None = None) -> Limits:
    reject_unknown_args(args, ())
    return Limits(policy or PriorityPolicy())


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = Limits
_RESERVE: type[ReservePlugin] = Limits
