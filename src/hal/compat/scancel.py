"""The ``scancel`` command.

Ids may be ``123`` (a job, or a whole array), ``123_4`` (an element), ``123_[1-3,7]``
(elements, indices below the cluster's MaxArraySize as in Slurm) or ``123.4`` (a step:
its tasks are killed on every node and it ends CANCELLED; with ``-s``, they get the
signal). Filters (``-u``,
``--me``, ``-n``, ``-p``, ``-t``, ``-A``, ``-q``, ``-R``, and ``-w`` for the jobs running on
any of its nodes, as Slurm's) select jobs on their own or narrow the given ids.
``-s SIG`` sends a signal instead of cancelling: to the job's steps (what srun runs)
and not to the batch shell, as Slurm's scancel does with any signal but SIGKILL, so a
step trapping it (to checkpoint, say) goes on and so does its job. ``-f`` sends it to
the batch shell and every process of the job too. ``-b`` sends it to the batch shell
only, not to the processes it started (Slurm's "signal only the batch step"; a shell
that traps the signal can then act on it); without ``-s``, ``-b`` sends SIGKILL, as
Slurm's scancel does (the job ends: the agent kills what the shell leaves behind, and a
pending job is cancelled).

``-i`` asks for each job on stdout (``Cancel job_id=13_[3] name=arr partition=debug
[y/n]? ``) and cancels those answered y. A signal other than SIGKILL to a pending job is
tried again 10 times, 5 to 14 s apart, then fails with exit 228, as Slurm's.

Exit codes follow Slurm 22.05.8: an id that does not exist is silent and exits 0 (with
``-v``: ``scancel: error: Kill job error on job id N: Invalid job id specified``, checked
against it); cancelling a job that already ended is silent, as Slurm ignores
that error for a plain cancel. Other failures (permission, server down) exit 1.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hal.compat.options import Arg, Opt, OptionError, parse_options
from hal.compat.seam import Console
from hal.compat.user_names import resolve_user
from hal.compat.version import VERSION_LINE
from hal.core.errors import Conflict, HalError, InvalidRequest, NotFound, PermissionDenied
from hal.core.states import STATES_BY_CODE
from hal.slurm.syntax import (
    DEFAULT_MAX_ARRAY_SIZE,
    compress_indices,
    expand_hostlist,
    parse_array,
    parse_signal_name,
)

if TYPE_CHECKING:
    from hal.wire.jobs import JobInfo

OPTIONS = (
    Opt("user", ("user",), "u"),
    Opt("me", ("me",), arg=Arg.NONE),
    Opt("name", ("name", "jobname"), "n"),
    Opt("partition", ("partition",), "p"),
    Opt("state", ("state",), "t"),
    Opt("account", ("account",), "A"),
    Opt("qos", ("qos",), "q"),
    Opt("reservation", ("reservation",), "R"),
    Opt("nodelist", ("nodelist",), "w"),
    Opt("hurry", ("hurry",), arg=Arg.NONE),  # (no burst buffer to skip staging out: none)
    Opt("signal", ("signal",), "s"),
    Opt("batch", ("batch",), "b", Arg.NONE),
    Opt("quiet", ("quiet",), "Q", Arg.NONE),
    Opt("verbose", ("verbose",), "v", Arg.NONE),
    Opt("full", ("full",), "f", Arg.NONE),
    Opt("interactive", ("interactive",), "i", Arg.NONE),
    Opt("clusters", ("clusters",), "M"),
    Opt("help", ("help",), arg=Arg.NONE),
    Opt("usage", ("usage",), arg=Arg.NONE),
    Opt("version", ("version",), "V", Arg.NONE),
)

# scancel -t accepts only these (scancel.1).
CANCELLABLE_STATES = {"PENDING", "RUNNING", "SUSPENDED"}
_ID = re.compile(r"^(\d+)(?:_(\d+|\[[^\]]+\])|\+\d+)?$")  # 123, 123_4, 123_[1-3], 123+1
_STEP_ID = re.compile(r"^\d+(?:_\d+)?\.\w+$")  # 123.0, 123.batch: a job step
_NUMBERED_STEP = re.compile(r"^(\d+)\.(\d+)$")  # 123.4: a step scancel ends


@dataclass
class Request:
    targets: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    me: bool = False
    names: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    states: set[str] = field(default_factory=set)
    accounts: list[str] = field(default_factory=list)
    qos: list[str] = field(default_factory=list)
    reservations: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # -w, expanded: jobs running on any
    nodelist: list[str] = field(default_factory=list)  # ... as written (-v's line)
    signal: int | None = None
    signal_given: bool = False  # -s named it (-b alone sends SIGKILL, yet "Terminating")
    batch: bool = False  # -b: the batch shell only
    full: bool = False  # -f: the batch shell and its children too, and every step
    interactive: bool = False  # -i: ask for each job on stdout, read the answer on stdin
    quiet: bool = False
    verbose: bool = False
    version: bool = False  # -V: print the version line alone

    @property
    def filtered(self) -> bool:
        return bool(
            self.users
            or self.me
            or self.names
            or self.partitions
            or self.states
            or self.accounts
            or self.qos
            or self.reservations
            or self.nodelist
        )


NO_SUCH_STEP_EXIT = 2017 & 0xFF  # 225: scancel of a step its (known) job does not run
# scancel -s SIG of a pending job: Slurm's ESLURM_TRANSITION_STATE_NO_UPDATE (2020) as a
# byte, after MAX_CANCEL_RETRY tries 5, 6, .. 14 seconds apart (the job may start meanwhile)
NOT_NOW_EXIT = 2020 & 0xFF  # 228
MAX_CANCEL_RETRY = 10


def scancel(argv: list[str], console: Console) -> int:
    try:
        request = parse_request(argv)
    except OptionError as err:
        return console.error(err.for_command("scancel"))
    except HalError as err:
        return console.error(err.message)
    if request is None:
        console.out(
            "Usage: scancel [-Q] [-s signal] [-u user] [--me] [-n name] [-p partition] "
            "[-t state] [job_id[_array_id]]..."
        )
        return 0
    if request.version:
        console.out(VERSION_LINE)
        return 0
    if not request.targets and not request.filtered:
        return console.error("No job identification provided")
    try:
        return _cancel(request, console)
    except HalError as err:
        return console.error(err.message)


def parse_request(argv: list[str]) -> Request | None:
    parsed = parse_options(argv, OPTIONS)
    request = Request()
    for dest, value, _spelled in parsed.values:
        text = value or ""
        items = [item.strip() for item in text.split(",") if item.strip()]
        if dest in ("help", "usage"):
            return None
        if dest == "version":
            return Request(version=True)  # (as Slurm's getopt loop: at once)
        if dest == "user":
            request.users += items
        elif dest == "me":
            request.me = True
        elif dest == "name":
            request.names += items
        elif dest == "partition":
            request.partitions += items
        elif dest == "account":
            request.accounts += items
        elif dest == "qos":
            request.qos += items
        elif dest == "reservation":
            request.reservations += items
        elif dest == "nodelist":
            request.nodelist.append(text)
            request.nodes += expand_hostlist(text.replace(" ", ","))
        elif dest == "state":
            request.states |= {_state(item) for item in items}
        elif dest == "signal":
            request.signal = _signal(text)
            request.signal_given = True
        elif dest == "batch":
            request.batch = True
        elif dest == "full":
            request.full = True
        elif dest == "interactive":
            request.interactive = True
        elif dest == "quiet":
            request.quiet = True
        elif dest == "verbose":
            request.verbose = True
    for word in parsed.positionals:
        for item in _split_ids(word):  # checked here; 12_[1-3] is expanded when cancelling
            _check_id(item)
            request.targets.append(item)
    if request.batch and request.signal is None:
        request.signal = signals.SIGKILL  # scancel(1): SIGKILL unless -s says otherwise
    return request


def steps_only(request: Request) -> bool:
    """Whether the signal goes to the job's steps alone: scancel(1) sends signals other
    than SIGKILL to the batch shell only with ``-b`` (it alone) or ``-f`` (it and its
    children, and every step)."""
    return request.signal not in (None, signals.SIGKILL) and not request.batch and not request.full


def _signal(text: str) -> int:
    try:
        return parse_signal_name(text, field="signal")
    except InvalidRequest:
        raise InvalidRequest(
            f"Unknown job signal: {text}; name one such as USR1, TERM, KILL or INT, or give "
            "its number (10)",
            field="signal",
        ) from None


def _check_id(item: str) -> None:
    if not (_ID.match(item) or _NUMBERED_STEP.match(item)):
        raise _id_error(item)


def _id_error(item: str) -> InvalidRequest:
    if _STEP_ID.match(item):  # (123.batch, 123.extern; 123_4.0: Slurm 22.05's refuses
        job = item.partition(".")[0]  # the first two as well)
        return InvalidRequest(
            f"Invalid job id {item}; name a step by its job's number and the step's "
            f"(123.4: squeue -s lists them), or the batch shell with scancel -b {job}",
            field="job_id",
        )
    return InvalidRequest(
        f"Invalid job id {item}; write 123, 123_4, 123_[1-3] or 123+1", field="job_id"
    )


def _state(text: str) -> str:
    upper = text.upper()
    state = STATES_BY_CODE[upper].value if upper in STATES_BY_CODE else upper
    if state not in CANCELLABLE_STATES:
        raise InvalidRequest(
            f"Invalid job state specified: {text}; use PENDING, RUNNING or SUSPENDED",
            field="state",
        )
    return state


def expand_target(word: str, max_array_size: int = DEFAULT_MAX_ARRAY_SIZE) -> list[str]:
    """``123`` → [``123``]; ``123_4`` → [``123_4``]; ``123_[1-3]`` → ``123_1``.. Indices
    stop below the cluster's MaxArraySize, as Slurm's scancel (a typo such as
    ``12_[0-99999999]`` must not become a hundred million requests)."""
    targets: list[str] = []
    for item in _split_ids(word):
        m = _ID.match(item)
        if m is None:
            raise _id_error(item)
        job, element = m.group(1), m.group(2)
        if element is None or not element.startswith("["):
            targets.append(item)
            continue
        try:
            spec = parse_array(element[1:-1], max_array_size=max_array_size, field="job_id")
        except InvalidRequest:
            raise InvalidRequest(
                f"Invalid job id {item}: array indices are ranges such as [1-3,7] or "
                f"[0-15:4], from 0 to {max_array_size - 1} (MaxArraySize={max_array_size})",
                field="job_id",
            ) from None
        targets += [f"{job}_{index}" for index in spec.indices]
    return targets


def _max_array_size(console: Console) -> int:
    setting = console.client.cluster_config().settings.get("MaxArraySize", "")
    return int(setting) if setting.isdigit() else DEFAULT_MAX_ARRAY_SIZE


def _split_ids(word: str) -> list[str]:
    # Commas inside brackets belong to the index list: 12_[1,3],13 → 12_[1,3] and 13.
    items, depth, current = [], 0, ""
    for ch in word:
        depth += ch == "["
        depth -= ch == "]"
        if ch in ", " and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [item for item in items if item]


def _cancel(request: Request, console: Console) -> int:
    client = console.client
    given_users = list(request.users)
    users = [resolve_user(client, text) for text in request.users]
    for text, name in zip(request.users, users, strict=True):
        if name is None:  # before any cancel, as Slurm's scancel reads its options
            return console.error(f"Invalid user name: {text}")
    request.users = [name for name in users if name is not None]
    if request.me:
        request.users.append(console.current_user())
    steps = [t for t in request.targets if _NUMBERED_STEP.match(t)]  # (filters: jobs only)
    targets = [t for t in request.targets if t not in steps]
    if any("[" in target for target in targets):
        limit = _max_array_size(console)
        targets = [t for target in targets for t in expand_target(target, limit)]
    if request.filtered and (targets or not steps):
        jobs = client.jobs(
            ids=targets or None,
            users=request.users or None,
            names=request.names or None,
            partitions=request.partitions or None,
        )
        targets = [
            job.display_id
            for job in jobs
            if (not request.states or job.state in request.states)
            and (not request.accounts or (job.account or "") in request.accounts)
            and (not request.qos or (job.qos or "") in request.qos)
            and (not request.reservations or job.reservation in request.reservations)
            and (not request.nodes or not set(job.nodes).isdisjoint(request.nodes))
            and (not request.users or job.user in request.users)
            and (not request.names or job.name in request.names)
            and (
                not request.partitions  # (a pending job may list several: -p a,b)
                or not set(job.partition.split(",")).isdisjoint(request.partitions)
            )
            and job.state in CANCELLABLE_STATES
        ]
        if not targets and request.verbose:
            console.error(_no_match(request, given_users))
    rc = 0
    if request.interactive:
        targets, steps, rc = _confirm(targets, steps, console)
    for target in targets:
        rc = max(rc, _cancel_one(target, request, console))
    for target in steps:
        rc = max(rc, _cancel_step(target, request, console))
    return rc


def _no_match(request: Request, given_users: list[str]) -> str:
    """Slurm's ``-v`` line when the filters leave no job, its filters in its order and as
    written (``-t R``: ``state=RUNNING``), with its trailing space."""
    users = given_users + ([request.users[-1]] if request.me else [])
    words = [
        ("account", ",".join(request.accounts)),
        ("job_name", ",".join(request.names)),
        ("nodelist", ",".join(request.nodelist)),
        ("partition", ",".join(request.partitions)),
        ("qos", ",".join(request.qos)),
        ("reservation", ",".join(request.reservations)),
        ("state", ",".join(sorted(request.states))),
        ("user_name", ",".join(users)),
    ]
    listed = "".join(f"{key}={value} " for key, value in words if value)
    return f"No active jobs match ALL job filters, including: {listed}"


def _confirm(
    targets: list[str], steps: list[str], console: Console
) -> tuple[list[str], list[str], int]:
    """``-i``: Slurm's question for each job (an array's pending elements are one, as its
    pending record: ``13_[3-5]``) and step, on stdout, answered on stdin: a line starting
    with y cancels, with n spares, anything else asks again. At the end of input Slurm
    asks forever; HAL spares the job. A job that is not there is an error (exit 1), as
    Slurm's, which looks jobs up before asking."""
    rc = 0
    answers: dict[str, bool] = {}
    labels: dict[int, str | None] = {}  # array → its pending record's name (one request)
    chosen: list[str] = []
    for target in targets:
        jobs = console.client.jobs(ids=[target])
        if not jobs:
            rc = console.error(f"Kill job error on job id {target}: Invalid job id specified")
        for job in jobs:
            label = None
            if job.array_job_id is not None and job.state == "PENDING":
                if job.array_job_id not in labels:
                    labels[job.array_job_id] = _pending_label(job, console)
                label = labels[job.array_job_id]
            label = label or job.display_id
            if label not in answers:
                answers[label] = _ask(console, f"job_id={label}", job)
            if answers[label]:
                chosen.append(job.display_id)
    kept: list[str] = []
    for target in steps:
        job_id = target.partition(".")[0]
        try:
            job = console.client.job(job_id)
        except HalError:
            kept.append(target)  # (its error as without -i)
            continue
        if _ask(console, f"step_id={target}", job):
            kept.append(target)
    return list(dict.fromkeys(chosen)), kept, rc


def _pending_label(job: JobInfo, console: Console) -> str | None:
    """``13_[3-5]`` for a pending array element: the array's pending elements, as
    Slurm's pending array record names them (``13_[3]`` for one)."""
    if job.array_job_id is None or job.state != "PENDING":
        return None
    elements = console.client.jobs(ids=[str(job.array_job_id)])
    indices = [
        j.array_task_id for j in elements if j.state == "PENDING" and j.array_task_id is not None
    ]
    return f"{job.array_job_id}_[{compress_indices(indices)}]" if indices else None


def _ask(console: Console, what: str, job: JobInfo) -> bool:
    while True:
        console.stdout.write(f"Cancel {what} name={job.name} partition={job.partition} [y/n]? ")
        console.stdout.flush()
        line = console.stdin.readline()
        if not line:
            return False
        if line[0] in "yY":
            return True
        if line[0] in "nN":
            return False


def _cancel_step(target: str, request: Request, console: Console) -> int:
    """``scancel JOB.STEP``: the step ends CANCELLED (its tasks killed); with ``-s``,
    its tasks get the signal. A step that is not running is an error for a cancel and
    nothing for a signal, as Slurm 22.05.8's scancel (docs/slurm-checks.md)."""
    job_id, _, step_id = target.partition(".")
    try:
        console.client.cancel_step(int(job_id), int(step_id), request.signal)
        if request.verbose:
            console.err(f"scancel: Terminating step {target}")
        return 0
    except (NotFound, Conflict):
        if request.signal is not None or request.quiet:
            return 0
        if not _known(console, job_id):
            return console.error(
                f"Kill job error on job step id {target}: Invalid job id specified"
            )
        # the job is there, its step is not: Slurm names the job alone and exits with
        # ESLURM_INVALID_JOB_ID (2017) as a byte
        console.error(f"Kill job error on job step id {job_id}: Invalid job id specified")
        return NO_SUCH_STEP_EXIT
    except PermissionDenied:
        return console.error(f"Kill job error on job step id {target}: Access/permission denied")
    except HalError as err:
        return console.error(err.message)


def _known(console: Console, job_id: str) -> bool:
    try:
        console.client.job(job_id)
    except HalError:
        return False
    return True


def _verbose_line(target: str, request: Request) -> str:
    """Slurm 22.05.8's ``-v`` line: ``Signal 10 to batch job 29`` (``full job`` with
    ``-f``, which wins over ``-b``); without ``-s``, ``Terminating job 29`` (``full``,
    ``batch`` likewise: ``-b`` alone sends SIGKILL, yet terminates)."""
    whose = "full job" if request.full else "batch job" if request.batch else "job"
    if not request.signal_given or request.signal is None:
        return f"scancel: Terminating {whose} {target}"
    return f"scancel: Signal {request.signal} to {whose} {target}"


def _pending(target: str, console: Console) -> str | None:
    """How Slurm names ``target`` if it is pending (an array element: the array's
    pending record, ``13_[3-5]``); None if it is not."""
    for job in console.client.jobs(ids=[target]):
        if job.state == "PENDING":
            return _pending_label(job, console) or job.display_id
    return None


def _cancel_one(target: str, request: Request, console: Console) -> int:
    if request.verbose:
        console.err(_verbose_line(target, request))
    try:
        signalled = _send(target, request, console)
        if signalled or request.signal is None:
            return 0
        label = _pending(target, console)
        if label is None:  # a signal that reached nothing: the job has ended (Slurm's)
            return _gone(target, request, console)
        if request.signal == signals.SIGKILL:
            return 0
        # a signal other than SIGKILL to a pending job: Slurm's server refuses (the job
        # is in a transitional state) and its scancel tries again, then gives up
        for attempt in range(MAX_CANCEL_RETRY):
            if request.verbose:
                console.err("scancel: Job is in transitional state, retrying")
            console.sleep(5 + attempt)
            if _send(target, request, console):
                return 0
        console.error(  # (-Q too, as Slurm's)
            f"Kill job error on job id {label}: Job can not be altered now, try again later"
        )
        return NOT_NOW_EXIT
    except NotFound:
        if request.signal is not None:
            return _gone(target, request, console)
        if request.verbose:
            console.error(f"Kill job error on job id {target}: Invalid job id specified")
        return 0
    except Conflict:
        if request.signal is not None and not request.quiet:
            console.error(
                f"Kill job error on job id {target}: Job/step already completing or completed"
            )
        return 0
    except PermissionDenied:
        console.error(f"Kill job error on job id {target}: Access/permission denied")
        return 1


def _gone(target: str, request: Request, console: Console) -> int:
    """A signal (``-s``, ``-b``) for a job that has ended or never was: Slurm 22.05.8's
    scancel says so and exits 1 (a plain cancel of it is silent), unless ``-Q``."""
    if request.quiet:
        return 0
    console.error(f"Kill job error on job id {target}: Invalid job id specified")
    return 1


def _send(target: str, request: Request, console: Console) -> list[int]:
    """The ids the server signalled or cancelled (none for a signal to a pending job)."""
    return console.client.cancel(
        target,
        signal=request.signal,
        batch_only=request.batch,
        steps_only=steps_only(request),
    )
