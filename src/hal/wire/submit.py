"""What ``sbatch`` sends and gets back: ``JobSubmit``, ``SubmitResult``, ``WillRun``.

These are standard-library dataclasses, not pydantic models, on purpose: every ``hal
sbatch`` is a fresh process and importing pydantic costs more than the rest of the command
(the target is 150 ms). The server still validates them with pydantic, which reads the
``Annotated`` constraints (``annotated_types``) and ``__pydantic_config__``; the client only
turns them into JSON.

The annotations are strings (``from __future__ import annotations``) and name ``Ge``,
``Le`` and ``MaxLen`` without importing them: ``bind_limits()`` imports annotated_types and
puts them in this module's namespace when something needs to evaluate the annotations
(pydantic on the server, ``check`` on the client). That keeps ~15 ms of imports off
``sbatch``'s path.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from hal.wire.bounds import LATEST_SECONDS

if TYPE_CHECKING:
    from annotated_types import Ge, Le, MaxLen

T = TypeVar("T")
MAX_SCRIPT_ARGS = 4096  # words after the script (Linux takes far more; nobody needs them)
_ = Annotated  # used by the string annotations below


def bind_limits() -> None:
    """Make the names used in the annotations resolvable (see the module docstring)."""
    import annotated_types

    g = globals()
    g["Ge"], g["Le"], g["MaxLen"] = annotated_types.Ge, annotated_types.Le, annotated_types.MaxLen


@dataclass(slots=True)
class JobSubmit:
    """One job as a client asks for it. Slurm-syntax strings (``array``, ``dependency``,
    ``signal``) are parsed by the server with ``hal.slurm.syntax`` so every client gets
    the same rules and the same error messages."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    script: Annotated[str, MaxLen(4 * 1024 * 1024)]
    # the words after the script on sbatch's command line: the script gets them as $1,
    # $2, ... (their size in all is bounded by the server, as an execve's must be)
    script_args: Annotated[list[str], MaxLen(MAX_SCRIPT_ARGS)] = field(default_factory=list)
    # where sbatch read the script (absolute); shown in ``scontrol show job``'s Command=
    script_path: Annotated[str | None, MaxLen(4096)] = None
    name: Annotated[str, MaxLen(256)] = "sbatch"
    workdir: Annotated[str, MaxLen(4096)] = "/"
    environment: dict[str, str] = field(default_factory=dict)
    stdout: Annotated[str | None, MaxLen(4096)] = None
    stderr: Annotated[str | None, MaxLen(4096)] = None
    partition: Annotated[str | None, MaxLen(1024)] = None  # comma-separated
    nodes_min: Annotated[int, Ge(1), Le(100_000)] = 1
    nodes_max: Annotated[int | None, Ge(1), Le(100_000)] = None
    ntasks: Annotated[int | None, Ge(1), Le(10_000_000)] = None
    ntasks_per_node: Annotated[int | None, Ge(1), Le(100_000)] = None
    cpus_per_task: Annotated[int, Ge(1), Le(100_000)] = 1
    min_cpus_per_node: Annotated[int, Ge(0), Le(100_000)] = 0  # --mincpus
    memory_per_node_bytes: Annotated[int | None, Ge(0)] = None
    # 0 per CPU or per GPU: all of each node's memory, as memory_per_node_bytes=0 (the
    # server stores it so), as Slurm takes --mem-per-cpu=0 and --mem-per-gpu=0
    memory_per_cpu_bytes: Annotated[int | None, Ge(0)] = None
    memory_per_gpu_bytes: Annotated[int | None, Ge(0)] = None
    gpus_per_node: Annotated[int, Ge(0), Le(1024)] = 0
    gpus: Annotated[int, Ge(0), Le(1_000_000)] = 0
    gpus_per_task: Annotated[int, Ge(0), Le(1024)] = 0
    gpu_type: Annotated[str | None, MaxLen(64)] = None
    time_limit_seconds: Annotated[int | None, Ge(0), Le(LATEST_SECONDS)] = None
    # --time-min: backfill may lower the limit to no less than this (0 or None: never)
    time_min_seconds: Annotated[int | None, Ge(0), Le(LATEST_SECONDS)] = None
    array: Annotated[str | None, MaxLen(4096)] = None
    dependency: Annotated[str | None, MaxLen(4096)] = None
    kill_on_invalid_dep: bool = False
    account: Annotated[str | None, MaxLen(256)] = None
    qos: Annotated[str | None, MaxLen(256)] = None
    constraint: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    nodelist: list[str] = field(default_factory=list)
    hold: bool = False
    begin_time: Annotated[float | None, Le(LATEST_SECONDS)] = None  # NaN fails Le too
    # --burst-after: "10m", "0.5x" (its time limit), "10m+0.5x" or "never"; "": default
    burst_after: Annotated[str, MaxLen(64)] = ""
    # --deadline (epoch seconds): a pending job that cannot end by then is ended DEADLINE
    deadline: Annotated[float | None, Ge(0), Le(LATEST_SECONDS)] = None
    requeue: bool = True
    signal: Annotated[str | None, MaxLen(64)] = None
    exclusive: bool = False
    # --exclusive=user: its nodes are shared only with the same user's jobs (Slurm's
    # OverSubscribe=USER)
    exclusive_user: bool = False
    # --priority: the job's priority, kept as `scontrol update Priority=` keeps one; the
    # server takes it from an administrator only (a user's is dropped, as Slurm's)
    priority: Annotated[int | None, Ge(1), Le(4294967293)] = None
    comment: Annotated[str, MaxLen(4096)] = ""
    # --open-mode: "append" to the output files (a requeued run's output follows the
    # earlier runs') or "truncate" them; None: truncate, Slurm's default (JobFileAppend=0)
    open_mode: Literal["append", "truncate"] | None = None
    wckey: Annotated[str, MaxLen(256)] = ""  # --wckey, shown by squeue %w and sacct
    nice: Annotated[int, Ge(-10000), Le(10000)] = 0
    submit_host: Annotated[str, MaxLen(256)] = ""
    switches: Annotated[str | None, MaxLen(64)] = None  # "count[@max-time]"
    topology: Annotated[str | None, MaxLen(256)] = None  # "required=LEVEL|preferred=LEVEL"
    # --near / --apart: placement rules towards other jobs, "[required=|preferred=]job:ID
    # [@LEVEL]" or "...name:NAME[@LEVEL]"; each entry may list several, comma-separated
    near: Annotated[list[Annotated[str, MaxLen(4096)]], MaxLen(32)] = field(default_factory=list)
    apart: Annotated[list[Annotated[str, MaxLen(4096)]], MaxLen(32)] = field(default_factory=list)
    # --feedback-goal: "NAME:max|min" (each entry may list several, comma-separated)
    feedback_goal: Annotated[list[Annotated[str, MaxLen(4096)]], MaxLen(32)] = field(
        default_factory=list
    )
    # --feedback-metrics: "URL[#name,...]", the job's own Prometheus endpoint on its node
    feedback_metrics: Annotated[str | None, MaxLen(2048)] = None
    data: list[str] = field(default_factory=list)  # --data: input cache keys
    # --artifact: "NAME[@VERSION]" (each may list several, comma-separated); pinned to
    # their content at submission (docs/user/artifacts.md)
    artifacts: list[Annotated[str, MaxLen(4096)]] = field(default_factory=list)
    # --python-env: the lock files, {"requirements.txt": TEXT} or {"pyproject.toml": TEXT,
    # "uv.lock": TEXT}; each node builds the environment once (docs/user/environments.md)
    python_env: Annotated[dict[str, str] | None, MaxLen(2)] = None
    # --container: "NAME[@VERSION]" (an image artifact) or an OCI bundle's absolute path;
    # the job runs in it (docs/user/environments.md)
    container: Annotated[str | None, MaxLen(4096)] = None
    reservation: Annotated[str, MaxLen(256)] = ""  # --reservation: run in this reservation
    licenses: Annotated[str | None, MaxLen(4096)] = None  # -L "matlab:2,ansys" (Slurm's)
    # the submitter's umask, 3-4 octal digits ("0022"): the job runs with it and finds it
    # in SLURM_UMASK (sbatch sends that variable itself, as Slurm's does); None: the node's
    umask: Annotated[str | None, MaxLen(4)] = None
    # --mail-type as Slurm writes it ("BEGIN,END", "ALL", "NONE"), parsed by the server;
    # --mail-user (None: the submitting user, @ the cluster's [mail] domain when it has one)
    mail_type: Annotated[str | None, MaxLen(256)] = None
    mail_user: Annotated[str | None, MaxLen(256)] = None
    # salloc's allocation: its script only holds the nodes while salloc's command runs
    # on the submit host; ``scontrol show job`` shows it as Slurm does, BatchFlag=0
    interactive: bool = False
    # --latency-sensitive: keep the job from noisy neighbours first (docs/harmonic.md)
    latency_sensitive: bool = False
    # --malleable: resizable within its --nodes=LO-HI or --cpus-per-task=LO-HI (the high
    # end of which is cpus_per_task_max) by the feedback controller (docs/feedback.md)
    malleable: bool = False
    cpus_per_task_max: Annotated[int | None, Ge(1), Le(100_000)] = None


@dataclass(slots=True)
class SubmitResult:
    """``job_id`` is the id sbatch prints (the array job id for arrays)."""

    job_id: int
    task_ids: list[int] = field(default_factory=list)  # ids of array elements, in order


@dataclass(slots=True)
class WillRun:
    """Answer to ``--test-only``: where and when the job would start."""

    expected_start: float
    nodes: list[str]
    partition: str
    job_id: int | None = None


def non_defaults(obj: Any, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of a wire dataclass that differ from their defaults."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if f.name in exclude:
            continue
        value = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING:
            if value == f.default:
                continue
        elif f.default_factory is not dataclasses.MISSING and value == f.default_factory():
            continue
        out[f.name] = value
    return out


def to_json(obj: Any) -> str:
    """JSON of a wire dataclass, defaults left out (the server fills them)."""
    return json.dumps(non_defaults(obj), separators=(",", ":"))


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build a wire dataclass from a server answer, ignoring fields this client does not
    know (a newer server may send more)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def check(obj: Any) -> None:
    """Apply the ``Annotated`` limits of a wire dataclass on the client, before sending,
    so a bad option fails fast with the same rule the server enforces."""
    import typing

    from annotated_types import Ge, Le, MaxLen

    bind_limits()
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            continue
        for limit in getattr(hints.get(f.name), "__metadata__", ()):
            if isinstance(limit, Ge) and value < limit.ge:
                raise ValueError(f"{f.name} must be at least {limit.ge}, not {value}")
            if isinstance(limit, Le) and value > limit.le:
                raise ValueError(f"{f.name} must be at most {limit.le}, not {value}")
            if isinstance(limit, MaxLen) and len(value) > limit.max_length:
                if isinstance(value, list):
                    raise ValueError(f"{f.name} has more than {limit.max_length} entries")
                raise ValueError(f"{f.name} is longer than {limit.max_length} characters")
