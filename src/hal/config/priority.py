"""``[priority]``, ``[[accounts]]``, ``[[users]]`` and ``[[qos]]`` of ``hal.toml``.

Example (Slurm's ``PriorityWeight*`` names in snake_case; times as Slurm writes them or
seconds)::

    [priority]                     # present: multifactor; absent: basic (FIFO)
    weight_age = 1000              # PriorityWeightAge
    weight_fairshare = 10000       # PriorityWeightFairshare
    weight_job_size = 100          # PriorityWeightJobSize
    weight_partition = 1000        # PriorityWeightPartition (PriorityJobFactor)
    weight_qos = 1000              # PriorityWeightQOS
    max_age = "7-0"                # PriorityMaxAge
    favor_small = false            # PriorityFavorSmall
    decay_half_life = "7-0"        # PriorityDecayHalfLife ("0": usage never decays)
    calc_period = 60               # PriorityCalcPeriod, seconds
    usage_gpu_weight = 0           # a GPU-second counts as this many CPU-seconds
    fairshare_algorithm = "classic"  # or "fair_tree" (Slurm: PriorityFlags=NO_FAIR_TREE or not)

    [[accounts]]
    name = "physics"               # parent defaults to "root"
    fairshare = 2
    [[accounts]]
    name = "lattice"
    parent = "physics"
    max_jobs = 10                  # MaxJobs: running jobs per user (limits: any is optional)
    grp_jobs = 50                  # GrpJobs: running jobs of the account and its children
    grp_tres = { cpus = 512, gpus = 16, mem = "2T", nodes = 32 }   # GrpTRES
    max_submit_jobs = 40           # MaxSubmitJobs: pending + running per user (at submit)
    grp_submit_jobs = 200          # GrpSubmitJobs: pending + running of all its users
    max_tres_per_job = { cpus = 128, gpus = 8, mem = "512G", nodes = 4 }  # MaxTRES
    max_wall = "2-0"               # MaxWall (MaxWallDurationPerJob)
    cloud_budget = "500 USD/month" # new [cloud] nodes: at most this spend a day, week or month

    [[users]]
    name = "alice"
    default_account = "lattice"
    accounts = ["lattice", "physics"]   # optional: more associations
    fairshare = 1

    [[qos]]
    name = "high"
    priority = 100
    max_jobs_per_user = 4          # MaxJobsPerUser (running)
    max_submit_jobs_per_user = 20  # MaxSubmitJobsPerUser (pending + running; at submit)
    max_wall = "1-0"               # MaxWall (per job)
    max_tres_per_job = { cpus = 64, gpus = 4, mem = "256G", nodes = 2 }  # MaxTRESPerJob
    grp_tres = { cpus = 1024, gpus = 32, mem = "4T", nodes = 64 }     # GrpTRES
    grp_jobs = 100                 # GrpJobs (running)
    cloud_budget = "50 USD/day"    # as an account's, over the QoS's jobs
    latency_sensitive = true       # its jobs are kept from noisy neighbours first (HAL)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hal.core.cloud_costs import CloudBudget, parse_budget
from hal.core.errors import InvalidRequest, did_you_mean
from hal.core.priority import (
    FAIRSHARE_ALGORITHMS,
    NO_TRES_LIMITS,
    Account,
    PriorityPolicy,
    Qos,
    TresLimits,
    UserAccount,
)

PRIORITY_KEYS = ("priority", "accounts", "users", "qos")
MAX_WEIGHT = 2**32 - 1  # PriorityWeight* are 32-bit in Slurm
_WEIGHTS = ("weight_age", "weight_fairshare", "weight_job_size", "weight_partition", "weight_qos")
_DURATIONS = {"max_age": "max_age_s", "decay_half_life": "decay_half_life_s"}
_NUMBERS = {"calc_period": "calc_period_s", "usage_gpu_weight": "usage_gpu_weight"}
_KEYS = {*_WEIGHTS, *_DURATIONS, *_NUMBERS, "favor_small", "fairshare_algorithm"}
# The largest number of seconds (or count) a config value may hold: a start plus it is
# still a date (hal.wire.bounds.LATEST_SECONDS; the config plane imports only hal.core).
LONGEST_S = 95_617_584_000


def fail(source: str, field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{source}: {field}: {message}", field=field)


def unknown_key(key: str, known: Iterable[str]) -> str:
    """The message for ``key`` not in ``known``: a near miss named, then every key."""
    return f"unknown key{did_you_mean(key, known)}; known: {sorted(known)}"


def whole_number(value: Any, source: str, field: str, least: int = 0) -> int:
    """An integer ``least`` .. ``LONGEST_S`` (not a bool, a float or a string)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise fail(source, field, f"must be a whole number >= {least} (got {value!r})")
    if value > LONGEST_S:
        raise fail(source, field, f"must be at most {LONGEST_S} (got {value!r})")
    return value


def positive_seconds(value: Any, source: str, field: str) -> float:
    """A number of seconds > 0 and at most ``LONGEST_S`` (not NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= LONGEST_S:
        raise fail(source, field, f"must be a number of seconds > 0 and finite (got {value!r})")
    return float(value)


def duration(value: Any, source: str, field: str) -> float:
    from hal.slurm.syntax import parse_time_limit

    if isinstance(value, bool):
        raise fail(source, field, 'must be a duration like "7-0" or a number of seconds')
    seconds: int | float
    if isinstance(value, int | float):
        seconds = value
    else:
        try:
            seconds = parse_time_limit(str(value))
        except (ValueError, InvalidRequest) as err:
            raise fail(source, field, f"{value!r} is not a duration") from err
    if seconds < 0:
        raise fail(source, field, "must not be negative")
    if not seconds <= LONGEST_S:  # NaN, infinity or past the year 5000
        raise fail(source, field, f"must be a finite duration, at most {LONGEST_S} seconds")
    return float(seconds)


def priority_from_dict(raw: dict[str, Any], source: str = "config") -> PriorityPolicy:
    """The priority policy of a parsed config file (``{}``: basic priority)."""
    table = raw.get("priority")
    kwargs: dict[str, Any] = {}
    if table is not None:
        if not isinstance(table, dict):
            raise fail(source, "priority", "[priority] must be a table")
        unknown = set(table) - _KEYS
        if unknown:
            name = sorted(unknown)[0]
            raise fail(source, f"priority.{name}", unknown_key(name, _KEYS))
        kwargs["enabled"] = True
        for key in _WEIGHTS:
            if key in table:
                value = table[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise fail(source, f"priority.{key}", "must be a non-negative integer")
                if value > MAX_WEIGHT:  # their sum must fit the store's 64-bit priority
                    raise fail(
                        source, f"priority.{key}", f"must be at most {MAX_WEIGHT} (as Slurm's)"
                    )
                kwargs[key] = value
        for key, attr in _DURATIONS.items():
            if key in table:
                kwargs[attr] = duration(table[key], source, f"priority.{key}")
        if kwargs.get("max_age_s") == 0:
            raise fail(source, "priority.max_age", "must be longer than 0")
        for key, attr in _NUMBERS.items():
            if key in table:
                value = table[key]
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if not number or not 0 <= value <= LONGEST_S:  # also NaN and infinity
                    raise fail(source, f"priority.{key}", "must be a non-negative number")
                kwargs[attr] = float(value)
        if kwargs.get("calc_period_s") == 0:
            raise fail(source, "priority.calc_period", "must be longer than 0")
        if "favor_small" in table:
            if not isinstance(table["favor_small"], bool):
                raise fail(source, "priority.favor_small", "must be true or false")
            kwargs["favor_small"] = table["favor_small"]
        if "fairshare_algorithm" in table:
            algorithm = table["fairshare_algorithm"]
            if algorithm not in FAIRSHARE_ALGORITHMS:
                raise fail(
                    source,
                    "priority.fairshare_algorithm",
                    f"{algorithm!r} is not one of {list(FAIRSHARE_ALGORITHMS)}",
                )
            kwargs["fairshare_algorithm"] = algorithm
    kwargs["accounts"] = _accounts(raw.get("accounts", []), source)
    names = {a.name for a in kwargs["accounts"]}
    kwargs["users"] = _users(raw.get("users", []), source, names)
    kwargs["qos"] = _qos(raw.get("qos", []), source)
    return PriorityPolicy(**kwargs)


def _entries(items: Any, source: str, name: str, keys: set[str]) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise fail(source, name, f"[[{name}]] must be an array of tables")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise fail(source, f"{name}[{i}].name", "needs a name")
        unknown = set(item) - keys
        if unknown:
            first = sorted(unknown)[0]
            raise fail(source, f"{name}[{i}].{first}", unknown_key(first, keys))
    return items


def _shares(item: dict[str, Any], source: str, field: str) -> int:
    value = item.get("fairshare", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(source, field, "fairshare must be a non-negative integer")
    return value


def _count(item: dict[str, Any], key: str, source: str, field: str) -> int | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(source, field, "must be a non-negative integer")
    return int(value)


_TRES_KEYS = {"cpus", "gpus", "mem", "nodes"}


def _tres(item: dict[str, Any], key: str, source: str, field: str, keys: set[str]) -> TresLimits:
    table = item.get(key)
    if table is None:
        return NO_TRES_LIMITS
    if not isinstance(table, dict):
        raise fail(source, field, "must be a table like { cpus = 64, gpus = 4 }")
    unknown = set(table) - keys
    if unknown:
        first = sorted(unknown)[0]
        raise fail(source, f"{field}.{first}", unknown_key(first, keys))
    mem: int | None = None
    if "mem" in table:
        raw = table["mem"]
        if isinstance(raw, bool) or not isinstance(raw, int | str):
            raise fail(source, f"{field}.mem", 'must be a size like "512G" or MiB')
        from hal.slurm.syntax import parse_memory

        try:
            mem = parse_memory(str(raw), field=f"{field}.mem")
        except InvalidRequest as err:
            raise fail(source, f"{field}.mem", str(err)) from err
    return TresLimits(
        cpus=_count(table, "cpus", source, f"{field}.cpus"),
        gpus=_count(table, "gpus", source, f"{field}.gpus"),
        mem_bytes=mem,
        nodes=_count(table, "nodes", source, f"{field}.nodes"),
    )


def _wall(item: dict[str, Any], source: str, where: str) -> int | None:
    """``max_wall`` (MaxWall) of a QoS or account, in whole seconds."""
    wall = item.get("max_wall")
    return None if wall is None else int(duration(wall, source, f"{where}.max_wall"))


def _accounts(items: Any, source: str) -> tuple[Account, ...]:
    out = []
    keys = {"name", "parent", "fairshare", "max_jobs", "grp_jobs", "grp_tres"}
    keys |= {"max_submit_jobs", "grp_submit_jobs", "max_tres_per_job", "max_wall"}
    keys |= {"cohort", "borrow_limit", "cloud_budget"}
    for i, item in enumerate(_entries(items, source, "accounts", keys)):
        parent = item.get("parent", "root")
        if not isinstance(parent, str) or not parent:
            raise fail(source, f"accounts[{i}].parent", "must be an account name")
        where = f"accounts[{i}]"
        out.append(
            Account(
                item["name"],
                parent,
                _shares(item, source, f"accounts[{i}].fairshare"),
                max_jobs=_count(item, "max_jobs", source, f"accounts[{i}].max_jobs"),
                grp_jobs=_count(item, "grp_jobs", source, f"accounts[{i}].grp_jobs"),
                grp_tres=_tres(item, "grp_tres", source, f"{where}.grp_tres", _TRES_KEYS),
                max_tres_per_job=_tres(
                    item, "max_tres_per_job", source, f"{where}.max_tres_per_job", _TRES_KEYS
                ),
                max_wall_s=_wall(item, source, where),
                max_submit_jobs=_count(item, "max_submit_jobs", source, f"{where}.max_submit_jobs"),
                grp_submit_jobs=_count(item, "grp_submit_jobs", source, f"{where}.grp_submit_jobs"),
                cloud_budget=_budget(item, source, where),
                **_lending(item, source, where),
            )
        )
    parents = {a.name: a.parent for a in out}
    if len(parents) != len(out) or "root" in parents:
        raise fail(source, "accounts.name", "account names must be unique and not 'root'")
    for i, acct in enumerate(out):
        seen = {acct.name}
        up = acct.parent
        while up != "root":
            if up not in parents:
                raise fail(source, f"accounts[{i}].parent", f"unknown account {up!r}")
            if up in seen:
                raise fail(source, f"accounts[{i}].parent", f"{acct.name!r} is its own ancestor")
            seen.add(up)
            up = parents[up]
    _check_cohorts(out, source)
    return tuple(out)


def _budget(item: dict[str, Any], source: str, where: str) -> CloudBudget | None:
    """``cloud_budget`` of an account or QoS (``hal.core.cloud_costs``)."""
    if "cloud_budget" not in item:
        return None
    try:
        return parse_budget(item["cloud_budget"], "cloud_budget")
    except InvalidRequest as err:
        message = err.message.removeprefix("cloud_budget: ")
        raise fail(source, f"{where}.cloud_budget", message) from None


def _lending(item: dict[str, Any], source: str, where: str) -> dict[str, Any]:
    """``cohort`` and ``borrow_limit`` of one ``[[accounts]]`` entry."""
    cohort = item.get("cohort")
    if cohort is None:
        if "borrow_limit" in item:
            raise fail(source, f"{where}.borrow_limit", "only an account in a cohort borrows")
        return {}
    if not isinstance(cohort, str) or not cohort:
        raise fail(source, f"{where}.cohort", "must be a cohort name")
    if "grp_tres" not in item:
        raise fail(
            source,
            f"{where}.cohort",
            "an account in a cohort needs grp_tres: the quota it lends and borrows against",
        )
    return {
        "cohort": cohort,
        "borrow_limit": _tres(item, "borrow_limit", source, f"{where}.borrow_limit", _TRES_KEYS),
    }


def _check_cohorts(accounts: list[Account], source: str) -> None:
    members: dict[str, list[int]] = {}
    for i, a in enumerate(accounts):
        if a.cohort:
            members.setdefault(a.cohort, []).append(i)
    for name, where in members.items():
        if len(where) < 2:
            raise fail(
                source,
                f"accounts[{where[0]}].cohort",
                f"cohort {name!r} has one account; give at least two accounts the same cohort",
            )


def _users(items: Any, source: str, accounts: set[str]) -> tuple[UserAccount, ...]:
    keys = {"name", "default_account", "accounts", "fairshare"}
    out: list[UserAccount] = []
    seen: set[str] = set()
    for i, item in enumerate(_entries(items, source, "users", keys)):
        if item["name"] in seen:
            raise fail(source, f"users[{i}].name", f"user {item['name']!r} is listed twice")
        seen.add(item["name"])
        default = item.get("default_account")
        if not isinstance(default, str) or default not in accounts | {"root"}:
            raise fail(source, f"users[{i}].default_account", "must name one of the [[accounts]]")
        more = item.get("accounts", [])
        if not isinstance(more, list) or not all(isinstance(a, str) for a in more):
            raise fail(source, f"users[{i}].accounts", "must be a list of account names")
        shares = _shares(item, source, f"users[{i}].fairshare")
        for account in dict.fromkeys([default, *more]):
            if account not in accounts | {"root"}:
                raise fail(source, f"users[{i}].accounts", f"unknown account {account!r}")
            out.append(UserAccount(item["name"], account, shares, default=account == default))
    return tuple(out)


_QOS_KEYS = {
    "name",
    "priority",
    "max_jobs_per_user",
    "max_submit_jobs_per_user",
    "max_wall",
    "max_tres_per_job",
    "grp_tres",
    "grp_jobs",
    "preempt",
    "preempt_mode",
    "grace_time",
    "cloud_budget",
    "latency_sensitive",
}
PREEMPT_MODES = ("requeue", "cancel", "suspend")


def _qos(items: Any, source: str) -> tuple[Qos, ...]:
    out = []
    for i, item in enumerate(_entries(items, source, "qos", _QOS_KEYS)):
        value = item.get("priority", 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(source, f"qos[{i}].priority", "must be a non-negative integer")
        where = f"qos[{i}]"
        out.append(
            Qos(
                item["name"],
                value,
                max_jobs_per_user=_count(
                    item, "max_jobs_per_user", source, f"{where}.max_jobs_per_user"
                ),
                max_submit_jobs_per_user=_count(
                    item, "max_submit_jobs_per_user", source, f"{where}.max_submit_jobs_per_user"
                ),
                max_wall_s=_wall(item, source, where),
                max_tres_per_job=_tres(
                    item, "max_tres_per_job", source, f"{where}.max_tres_per_job", _TRES_KEYS
                ),
                grp_tres=_tres(item, "grp_tres", source, f"{where}.grp_tres", _TRES_KEYS),
                grp_jobs=_count(item, "grp_jobs", source, f"{where}.grp_jobs"),
                cloud_budget=_budget(item, source, where),
                **_qos_preemption(item, source, where),
                latency_sensitive=_flag(item, "latency_sensitive", source, where),
            )
        )
    if len({q.name for q in out}) != len(out):
        raise fail(source, "qos.name", "QoS names must be unique")
    _check_preempt_lists(out, source)
    return tuple(out)


def _flag(item: dict[str, Any], key: str, source: str, where: str) -> bool:
    value = item.get(key, False)
    if not isinstance(value, bool):
        raise fail(source, f"{where}.{key}", "must be true or false")
    return value


def _qos_preemption(item: dict[str, Any], source: str, where: str) -> dict[str, Any]:
    """``preempt``, ``preempt_mode`` and ``grace_time`` of one ``[[qos]]`` entry."""
    names = item.get("preempt", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise fail(source, f"{where}.preempt", "must be a list of QoS names")
    mode = item.get("preempt_mode")
    if mode is not None and mode not in PREEMPT_MODES:
        raise fail(source, f"{where}.preempt_mode", f"must be one of {', '.join(PREEMPT_MODES)}")
    grace = item.get("grace_time")
    return {
        "preempt": tuple(dict.fromkeys(names)),
        "preempt_mode": mode,
        "grace_time_s": None if grace is None else duration(grace, source, f"{where}.grace_time"),
    }


def _check_preempt_lists(qos: list[Qos], source: str) -> None:
    """Every ``preempt`` entry names another known QoS of a lower priority: a job is
    never preempted by one of equal or lower standing, and no two QoS can take turns
    evicting each other's jobs."""
    priority = {q.name: q.priority for q in qos}
    for i, q in enumerate(qos):
        for name in q.preempt:
            if name not in priority or name == q.name:
                raise fail(
                    source,
                    f"qos[{i}].preempt",
                    f"{name!r} is not another configured QoS; list names from [[qos]]",
                )
            if priority[name] >= q.priority:
                raise fail(
                    source,
                    f"qos[{i}].preempt",
                    f"QoS {q.name!r} may preempt {name!r} only with a higher priority; "
                    f"raise {q.name!r}'s priority above {priority[name]}",
                )
