"""``sbatch`` argument and ``#SBATCH`` parsing: an unchanged Slurm batch script plus argv
become one ``JobSubmit``.

Precedence, as Slurm: command line > ``SBATCH_*`` environment variables > ``#SBATCH``
directives. Directives are read until the first line that is neither a comment nor blank.
Every option outside HAL's compatibility set is an error naming the option: silently
ignoring ``--gres`` or ``--mem`` is how a scheduler loses its users' trust.

Accepted but without effect (documented, so nobody is surprised): ``-v`` beyond printing
the parsed request. ``--mail-type``/``--mail-user`` are checked here (sbatch's words for an
unknown type) and sent; the control plane runs the mail program (docs/user/mail.md).
"""

from __future__ import annotations

import os

from hal.compat import job_options
from hal.compat.exports import EXPORT_VARIABLE, export_environment
from hal.compat.options import (
    HINT_OPTIONS,
    RESOURCE_OPTIONS,
    Arg,
    Opt,
    OptionError,
    Parsed,
    parse_options,
)
from hal.compat.time_limits import command_time_limit
from hal.core.errors import InvalidRequest, UnsupportedOption
from hal.slurm.syntax import (
    expand_hostlist,
    format_umask,
    parse_array,
    parse_begin,
    parse_dependency,
    parse_gpus,
    parse_gres,
    parse_licenses,
    parse_memory,
    parse_nodes,
    parse_signal,
    parse_switches,
    parse_topology,
)

# sbatch's start-up is its cost to a workflow tool (see ``hal.compat``): the parsers of
# options few jobs give (--data, --artifact, --mail-type, --exclusive ...) are imported
# where those options are read, and the job goes out as JSON (``SbatchRequest.body``),
# not as a ``JobSubmit``, which would bring ``dataclasses`` in.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from hal.wire.submit import JobSubmit

N, OPT = Arg.NONE, Arg.OPTIONAL

# Taken, with no effect on what HAL does (``HINT_OPTIONS``, and the submitter's
# environment goes with the job anyway); the values are still checked
# (``_check_no_effect``), so a typo is an error.
HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")
NO_EFFECT = (
    Opt("get_user_env", ("get-user-env",), arg=OPT),
    *HINT_OPTIONS,
    Opt("use_min_nodes", ("use-min-nodes",), arg=N),
)

OPTIONS: tuple[Opt, ...] = (
    *RESOURCE_OPTIONS,
    Opt("output", ("output",), "o"),
    Opt("error", ("error",), "e"),
    Opt("partition", ("partition",), "p"),
    Opt("array", ("array",), "a"),
    Opt("dependency", ("dependency",), "d"),
    Opt("kill_on_invalid_dep", ("kill-on-invalid-dep",)),
    Opt("account", ("account",), "A"),
    Opt("qos", ("qos",), "q"),
    Opt("chdir", ("chdir",), "D"),
    Opt("constraint", ("constraint",), "C"),
    Opt("exclude", ("exclude",), "x"),
    Opt("nodelist", ("nodelist",), "w"),
    Opt("hold", ("hold",), "H", N),
    Opt("begin", ("begin",), "b"),
    Opt("deadline", ("deadline",)),
    Opt("burst_after", ("burst-after",)),
    Opt("mincpus", ("mincpus",)),
    Opt("requeue", ("requeue",), arg=N),
    Opt("no_requeue", ("no-requeue",), arg=N),
    Opt("signal", ("signal",)),
    Opt("time_min", ("time-min",)),
    Opt("exclusive", ("exclusive",), arg=OPT),
    Opt("no_kill", ("no-kill",), "k", OPT),
    Opt("priority", ("priority",)),
    Opt("switches", ("switches",)),
    Opt("topology", ("topology",)),
    Opt("near", ("near",)),
    Opt("apart", ("apart",)),
    Opt("feedback_goal", ("feedback-goal",)),
    Opt("feedback_metrics", ("feedback-metrics",)),
    Opt("latency_sensitive", ("latency-sensitive",), arg=N),
    Opt("malleable", ("malleable",), arg=N),
    Opt("data", ("data",)),
    Opt("artifact", ("artifact",)),
    Opt("python_env", ("python-env",)),
    Opt("container", ("container",)),
    Opt("comment", ("comment",)),
    Opt("open_mode", ("open-mode",)),
    Opt("wckey", ("wckey",)),
    Opt("reservation", ("reservation",)),
    Opt("licenses", ("licenses",), "L"),
    Opt("nice", ("nice",), arg=OPT),
    Opt("mail_type", ("mail-type",)),
    Opt("mail_user", ("mail-user",)),
    Opt("distribution", ("distribution",), "m"),
    *NO_EFFECT,
    Opt("wrap", ("wrap",)),
    Opt("parsable", ("parsable",), arg=N),
    Opt("wait", ("wait",), "W", N),
    Opt("test_only", ("test-only",), arg=N),
    Opt("quiet", ("quiet",), "Q", N),
    Opt("verbose", ("verbose",), "v", N),
    Opt("help", ("help",), "h", N),
    Opt("usage", ("usage",), arg=N),
    Opt("version", ("version",), "V", N),
)

# Slurm's input environment variables (sbatch.1, INPUT ENVIRONMENT VARIABLES) of the
# options HAL has; a value counts as the option's (a flag's value is not read). HAL once
# ignored SBATCH_WAIT, SBATCH_OUTPUT, SBATCH_ARRAY_INX and the others from SBATCH_ERROR
# on: `SBATCH_WAIT=1 sbatch ...` returned at once with rc 0.
ENV_OPTIONS = {
    "SBATCH_ACCOUNT": "account",
    "SBATCH_ACCTG_FREQ": "acctg_freq",
    "SBATCH_DISTRIBUTION": "distribution",
    "SBATCH_GPU_BIND": "gpu_bind",
    "SBATCH_HINT": "hint",
    "SBATCH_MEM_BIND": "mem_bind",
    "SBATCH_PROFILE": "profile",
    "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_DEADLINE": "deadline",
    "SBATCH_EXPORT": "export",
    "SBATCH_GPUS": "gpus",
    "SBATCH_GRES": "gres",
    "SBATCH_LICENSES": "licenses",
    "SBATCH_JOB_NAME": "job_name",
    "SBATCH_MEM_PER_CPU": "mem_per_cpu",
    "SBATCH_MEM_PER_GPU": "mem_per_gpu",
    "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_PARTITION": "partition",
    "SBATCH_QOS": "qos",
    "SBATCH_REQ_SWITCH": "switches",
    "SBATCH_RESERVATION": "reservation",
    "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time",
    "SBATCH_TIME_MIN": "time_min",
    "SBATCH_ERROR": "error",
    "SBATCH_OUTPUT": "output",
    "SBATCH_ARRAY_INX": "array",
    "SBATCH_EXCLUSIVE": "exclusive",
    "SBATCH_NO_KILL": "no_kill",
    "SBATCH_NO_REQUEUE": "no_requeue",
    "SBATCH_REQUEUE": "requeue",
    "SBATCH_OPEN_MODE": "open_mode",
    "SBATCH_GPUS_PER_NODE": "gpus_per_node",
    "SBATCH_GPUS_PER_TASK": "gpus_per_task",
    "SBATCH_WAIT": "wait",
    "SBATCH_WCKEY": "wckey",
}
# SBATCH_* variables that change nothing HAL does, so none is worth a warning
_ENV_HARMLESS = frozenset({"SBATCH_DEBUG", "SBATCH_IGNORE_PBS", "SBATCH_GET_USER_ENV"})
# flags whose variable's value is not read (SBATCH_WAIT=1, SBATCH_NO_REQUEUE=yes)
_ENV_FLAGS = frozenset({"no_requeue", "requeue", "wait"})


def ignored_variables(environ: Mapping[str, str]) -> list[str]:
    """The ``SBATCH_*`` variables set for options HAL does not have (SBATCH_TMP,
    SBATCH_CPUS_PER_GPU...): Slurm's sbatch would act on them, so sbatch says it does not."""
    return sorted(
        var
        for var, value in environ.items()
        if var.startswith("SBATCH_")
        and value
        and var not in ENV_OPTIONS
        and var not in _ENV_HARMLESS
    )


# At most one of each group per source; a higher-precedence source resets the others
# (Slurm's slurm_opt.c does the same, so `sbatch --mem-per-cpu=2G job.sh` works when
# job.sh says `#SBATCH --mem=4G`).
EXCLUSIVE_GROUPS = (
    (
        ("mem", "mem_per_cpu", "mem_per_gpu"),
        "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.",
    ),
    (
        ("gres", "gpus_per_node"),
        "--gres=gpu and --gpus-per-node are mutually exclusive; use one of them.",
    ),
)

_UNSUPPORTED_HINT = (
    "HAL does not support this option. Remove it, or see `sbatch --help` for the options "
    "HAL accepts"
)

# Slurm's heterogeneous jobs: components split by ``:`` on the command line or by
# ``#SBATCH hetjob`` (formerly ``packjob``) lines. HAL cannot place them yet.
_HETJOB_WORDS = ("hetjob", "packjob")
# Options that describe the whole heterogeneous job, not one component: taken from
# component 0, as Slurm does (its name, files, directory, environment, dependencies,
# start and time limit; the other components end when component 0's script ends).
JOB_WIDE = (
    "job_name",
    "output",
    "error",
    "chdir",
    "export",
    "dependency",
    "kill_on_invalid_dep",
    "hold",
    "begin",
    "deadline",
    "burst_after",
    "time",
    "time_min",
    "requeue",
    "no_requeue",
    "signal",
    "comment",
    "open_mode",
    "wckey",
    "nice",
    "mail_type",
    "mail_user",
    "wrap",
    "parsable",
    "wait",
    "test_only",
    "quiet",
    "verbose",
)


class SbatchRequest:
    """What the sbatch command should do: submit ``body`` and how to report it.

    ``body`` is the job as ``POST /v1/jobs`` takes it: ``JobSubmit``'s fields that the
    options set, as JSON values; the server fills in the rest and checks it all.
    ``bodies``: a heterogeneous job's (``:`` on the command line, ``#SBATCH hetjob`` in
    the script), one per component, ``body`` the first; empty for an ordinary job.
    ``job`` and ``components`` are the same as ``JobSubmit``s, checked against the
    schema's limits (``job_of``), for code that wants them; a plain submission leaves
    the limits to the server, as checking them here would import ``dataclasses`` at
    start-up. ``warnings``: what Slurm's sbatch says on stderr (through info(), so not
    with -Q) about a request it changed before sending it, e.g. "Warning: can't run 1
    processes on 2 nodes, ..."."""

    __slots__ = (
        "bodies",
        "body",
        "help",
        "parsable",
        "quiet",
        "test_only",
        "verbose",
        "version",
        "wait",
        "warnings",
    )

    def __init__(
        self,
        body: dict[str, object],
        *,
        bodies: tuple[dict[str, object], ...] = (),
        parsable: bool = False,
        wait: bool = False,
        test_only: bool = False,
        quiet: bool = False,
        verbose: int = 0,
        help: bool = False,
        version: bool = False,
        warnings: tuple[str, ...] = (),
    ) -> None:
        self.body = body
        self.bodies = bodies
        self.parsable = parsable
        self.wait = wait
        self.test_only = test_only
        self.quiet = quiet
        self.verbose = verbose
        self.help = help
        self.version = version
        self.warnings = warnings

    @property
    def job(self) -> JobSubmit:
        return job_of(self.body)

    @property
    def components(self) -> tuple[JobSubmit, ...]:
        return tuple(job_of(body) for body in self.bodies)


def job_of(body: Mapping[str, object]) -> JobSubmit:
    """The ``JobSubmit`` of a request's ``body``, checked against the schema's limits
    (the server's, e.g. ``-c 0``) before anything is sent."""
    from hal.wire.submit import JobSubmit, check

    try:
        job = JobSubmit(**body)  # type: ignore[arg-type]
        check(job)
    except ValueError as err:
        raise InvalidRequest(f"invalid request: {err}") from None
    return job


Setting = tuple[str | None, str]  # (value, the option as the user spelled it)


def parse_sbatch(
    argv: list[str],
    *,
    environ: Mapping[str, str],
    cwd: str,
    read_stdin: Callable[[], str],
    now: float,
    hostname: str = "",
    umask: int | None = None,
) -> SbatchRequest:
    """Build the request (``umask``: the submitter's, ``process_umask()``). Raises
    ``InvalidRequest`` (``UnsupportedOption`` for options HAL lacks) with a message for
    ``sbatch: error:``."""
    segments = _split_components(argv)
    cli, last = segments[0], segments[-1]
    cli_settings, verbose = _settings(cli)
    if "help" in cli_settings or "usage" in cli_settings:
        return SbatchRequest({"script": ""}, help=True)
    if "version" in cli_settings:
        return SbatchRequest({"script": ""}, version=True)
    cli_levels = [cli_settings] + [_settings(seg)[0] for seg in segments[1:]]
    script = _script(last, {**cli_levels[-1], **cli_settings}, cwd, read_stdin)
    directive_levels = _settings_from_directives(script.text)
    env_settings: dict[str, Setting] = {
        dest: (None if dest in _ENV_FLAGS else environ[var], var)
        for var, dest in ENV_OPTIONS.items()
        if environ.get(var)
    }
    count = max(len(cli_levels), len(directive_levels))
    components: list[dict[str, Setting]] = []
    for i in range(count):
        # per component: its directives < (component 0 only) SBATCH_* < its options
        levels = [
            directive_levels[i] if i < len(directive_levels) else {},
            env_settings if i == 0 else {},
            cli_levels[i] if i < len(cli_levels) else {},
        ]
        components.append(_merge(levels))
    merged = components[0]
    if count > 1 and "array" in merged:
        raise InvalidRequest("a heterogeneous job cannot be a job array", field="array")
    jobs = []
    warnings: list[str] = []
    for i, settings in enumerate(components):
        if i > 0:
            if "array" in settings:
                raise InvalidRequest("a heterogeneous job cannot be a job array", field="array")
            own = {k: v for k, v in settings.items() if k not in JOB_WIDE}
            settings = {**own, **{k: v for k, v in merged.items() if k in JOB_WIDE}}
        body = _build_job(settings, script, environ=environ, cwd=cwd, now=now, warnings=warnings)
        jobs.append(_submitted_from(body, cwd, hostname, umask))
    if count > 1 or "test_only" in merged or verbose:
        # these build JobSubmits anyway (het and --test-only send them, -v lists one):
        # checked here against the schema's limits, before anything is sent
        for body in jobs:
            job_of(body)
    return SbatchRequest(
        jobs[0],
        bodies=tuple(jobs) if count > 1 else (),
        parsable="parsable" in merged,
        wait="wait" in merged,
        test_only="test_only" in merged,
        quiet="quiet" in merged,
        verbose=verbose,
        warnings=tuple(warnings),
    )


def job_from_options(
    parsed: Parsed,
    env_settings: dict[str, Setting],
    script: BatchScript,
    *,
    environ: Mapping[str, str],
    cwd: str,
    now: float,
    hostname: str = "",
    umask: int | None = None,
    warnings: list[str] | None = None,
) -> JobSubmit:
    """One job from command-line options over input environment variables (``salloc``'s
    ``SALLOC_*``), checked and built as sbatch builds its own; ``script`` is what runs.
    What sbatch would warn of (``SbatchRequest.warnings``) is appended to ``warnings``."""
    settings = _merge([env_settings, _settings(parsed)[0]])
    body = _build_job(settings, script, environ=environ, cwd=cwd, now=now, warnings=warnings)
    return job_of(_submitted_from(body, cwd, hostname, umask))


def job_from_directives(
    directives: Sequence[tuple[int, str]],
    script: BatchScript,
    *,
    environ: Mapping[str, str],
    cwd: str,
    now: float,
    hostname: str = "",
    umask: int | None = None,
    refused: Collection[str] = (),
    line: int = 0,
) -> JobSubmit:
    """One job from option lines ((line number, the options' text), scrontab's
    ``#SCRON`` lines, later lines winning), checked and built as sbatch builds its own.
    A line's mistake, or an option whose name is in ``refused``, raises ``InvalidRequest``
    starting "line N: "; a mistake of the options together names ``line`` (the entry's)."""
    levels: list[dict[str, Setting]] = []
    for number, text in directives:
        where = f"line {number}: "
        try:
            parsed = _parse(split_directive(text), stop_at_positional=False, where="")
        except InvalidRequest as err:
            raise type(err)(where + err.message, field=err.field) from None
        if parsed.positionals:
            raise InvalidRequest(
                f"{where}unexpected {parsed.positionals[0]!r}: only options go there",
                field="crontab",
            )
        level, _ = _settings(parsed)
        for dest, (_, spelled) in level.items():
            if dest in refused:
                raise UnsupportedOption(f"{where}{spelled} is not allowed here", field=dest)
        levels.append(level)
    try:
        body = _build_job(_merge(levels), script, environ=environ, cwd=cwd, now=now)
        return job_of(_submitted_from(body, cwd, hostname, umask))
    except InvalidRequest as err:
        raise type(err)(f"line {line}: {err.message}", field=err.field) from None


def _submitted_from(
    body: dict[str, object], cwd: str, hostname: str, umask: int | None
) -> dict[str, object]:
    """Where and how sbatch ran, in the environment it sends, as Slurm's sbatch does: the
    job's ``SLURM_SUBMIT_DIR`` is this directory even when ``--chdir`` starts the job
    elsewhere (``cd $SLURM_SUBMIT_DIR`` goes back to it), and a value inherited from an
    enclosing job is replaced; ``SLURM_UMASK`` is the submitter's umask, which the node
    applies to the job, unless the submitter's environment already names one."""
    environment = body.get("environment")
    env = dict(environment) if isinstance(environment, dict) else {}
    env.update(SLURM_SUBMIT_DIR=cwd, HAL_SUBMIT_DIR=cwd)
    if umask is not None:
        env.setdefault("SLURM_UMASK", format_umask(umask))
    if not hostname:
        return {**body, "environment": env}
    env.update(SLURM_SUBMIT_HOST=hostname, HAL_SUBMIT_HOST=hostname)
    return {**body, "environment": env, "submit_host": hostname}


def process_umask() -> int:
    """This process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _merge(levels: list[dict[str, Setting]]) -> dict[str, Setting]:
    """Later levels win; an option of an exclusive group drops the others of it."""
    merged: dict[str, Setting] = {}
    for level in levels:
        _check_exclusive(level)
        for group in [g for g, _ in EXCLUSIVE_GROUPS] + [("requeue", "no_requeue")]:
            if any(dest in level for dest in group):
                for dest in group:
                    merged.pop(dest, None)
        merged.update(level)
    return merged


def _split_components(argv: list[str]) -> list[Parsed]:
    """``sbatch OPTS : OPTS : OPTS script``: one parse per heterogeneous job
    component; the script (and its arguments) are the last one's positionals."""
    segments: list[Parsed] = []
    rest = argv
    while True:
        parsed = _parse(rest, stop_at_positional=True, where="")
        if parsed.positionals and parsed.positionals[0] == ":":
            segments.append(Parsed(parsed.values, ()))
            rest = list(parsed.positionals[1:])
            continue
        segments.append(parsed)
        return segments


def _parse(argv: list[str], *, stop_at_positional: bool, where: str) -> Parsed:
    try:
        return parse_options(argv, OPTIONS, stop_at_positional=stop_at_positional)
    except OptionError as err:
        field = err.option.lstrip("-")
        if not err.unknown:  # a known option without its value (or with one it takes none of)
            raise InvalidRequest(f"{err.message}{where}", field=field) from None
        raise UnsupportedOption(f"{err.message}{where}: {_UNSUPPORTED_HINT}", field=field) from None


def _settings(parsed: Parsed) -> tuple[dict[str, Setting], int]:
    settings: dict[str, Setting] = {}
    verbose = 0
    for dest, value, spelled in parsed.values:
        if dest == "verbose":
            verbose += 1
        if dest in ("requeue", "no_requeue"):
            # the later of the pair wins, so keep a single key
            settings.pop("requeue", None)
            settings.pop("no_requeue", None)
        if dest in ADDS_UP and dest in settings:
            value = _more_data(settings[dest][0], value)
        settings[dest] = (value, spelled)
    return settings, verbose


# HAL's lists: ``--data``, ``--artifact``, ``--near``, ``--apart`` and ``--feedback-goal``
# add up when repeated
ADDS_UP = ("data", "artifact", "near", "apart", "feedback_goal")


def _more_data(before: str | None, value: str | None) -> str | None:
    """HAL's ``--data``, ``--artifact``, ``--near`` and ``--apart`` add up when repeated
    (a job's inputs and rules are lists), where Slurm's own options keep the last; the
    command line still replaces the script's."""
    return f"{before},{value}" if before and value else value or before


def _check_exclusive(settings: dict[str, Setting]) -> None:
    for group, message in EXCLUSIVE_GROUPS:
        if sum(dest in settings for dest in group) > 1:
            raise InvalidRequest(message, field=group[0].replace("_", "-"))


# -- the script ---------------------------------------------------------------------------


class BatchScript:
    """The script to run and how sbatch was told of it: ``name``, the job name Slurm
    would default to; ``path``, the file's absolute path (None for stdin and --wrap);
    ``args``, the words after the path (the script's $1, $2, ...)."""

    __slots__ = ("args", "name", "path", "text")

    def __init__(
        self, text: str, name: str, path: str | None = None, args: tuple[str, ...] = ()
    ) -> None:
        self.text = text
        self.name = name
        self.path = path
        self.args = args


def _script(
    cli: Parsed, settings: dict[str, Setting], cwd: str, read_stdin: Callable[[], str]
) -> BatchScript:
    """The batch script: ``--wrap``'s command, the file the first positional names (the
    rest are its arguments, options or not, as in Slurm), or stdin (no arguments: Slurm
    has no way to give them to a script it reads there)."""
    if "wrap" in settings:
        if cli.positionals:
            raise InvalidRequest("Script arguments not permitted with --wrap option", field="wrap")
        command = settings["wrap"][0] or ""
        text = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"
        return BatchScript(text, "wrap")
    if not cli.positionals:
        script = BatchScript(read_stdin(), "sbatch")
    else:
        path, *args = cli.positionals
        try:
            with open(os.path.join(cwd, path), "rb") as f:
                data = f.read()
        except OSError as err:
            raise InvalidRequest(f"Unable to open file {path}: {err}", field="script") from None
        text = script_text(data, path)
        full = os.path.normpath(os.path.join(cwd, path))
        script = BatchScript(text, os.path.basename(full), full, tuple(args))
    _check_script(script.text)
    return script


def script_text(data: bytes, path: str | None) -> str:
    """A script's text as it is, byte for byte (no newline translation: a ``\r`` inside a
    line stays one, and DOS line breaks are refused as Slurm refuses them). HAL carries
    scripts as UTF-8 text; another encoding is refused with how to convert it (``path``:
    the file, None for stdin)."""
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        what = f"file {path}" if path else "the script on stdin"
        name = path or "SCRIPT"
        raise InvalidRequest(
            f"Unable to read {what}: it is not UTF-8 text (byte 0x{data[err.start]:02x} at "
            f"offset {err.start}); HAL carries batch scripts as UTF-8: convert it, e.g. "
            f"iconv -f latin1 -t utf-8 {name} > {name}.utf8",
            field="script",
        ) from None


def _check_script(script: str) -> None:
    # The same checks and words as Slurm's sbatch.
    if not script:
        raise InvalidRequest("Batch script is empty!", field="script")
    if not script.strip():
        raise InvalidRequest("Batch script contains only whitespace!", field="script")
    if not script.startswith("#!"):
        raise InvalidRequest(
            "This does not look like a batch script.  The first\n"
            "line must start with #! followed by the path to an interpreter.\n"
            "For instance: #!/bin/sh",
            field="script",
        )
    if "\r\n" in script:
        raise InvalidRequest(
            "Batch script contains DOS line breaks (\\r\\n)\n"
            "instead of expected UNIX line breaks (\\n).",
            field="script",
        )


def directive_lines(script: str) -> list[tuple[int, str]]:
    """(line number, text after ``#SBATCH`` or ``#HAL``) for each directive before the first
    command. ``#HAL`` lines take the same options; HAL's own (``--data``) read better there
    in a script that also runs under Slurm.

    As Slurm 22.05.8, whatever follows ``#SBATCH`` is the directive's text, space or not:
    ``#SBATCH-J x`` names the job x, and ``#SBATCHX -J x`` is refused ("Invalid directive
    found in batch script: X"), where HAL ignored both. ``#HAL`` (HAL's own) still needs a
    space after it, so a ``#HALT`` comment stays a comment."""
    found = []
    for number, line in enumerate(script.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # Slurm stops at the first line that is neither blank nor a comment
        if line.startswith("#SBATCH"):
            found.append((number, line[7:]))
        elif line.startswith("#HAL") and (len(line) == 4 or line[4].isspace()):
            found.append((number, line[4:]))
    return found


def split_directive(text: str) -> list[str]:
    """Words of a directive, split as Slurm 22.05.8's sbatch splits them (_get_argument):
    whitespace outside ``"..."``/``'...'`` ends a word; a backslash takes the next character
    as it is, in quotes too (``"a\\"b"`` is ``a"b``), except that unquoted whitespace ends
    the word all the same (``a\\ b`` is two words, ``a`` and ``b``: write ``"a b"``); an
    unquoted ``#``, even inside a word, begins a comment (``--comment=x#y`` is ``x``).
    Nothing is expanded (``$HOME`` stays literal, as Slurm documents)."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    quote = ""
    escaped = False
    for ch in text:
        if not quote and ch.isspace():
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            escaped = False  # (Slurm drops a backslash before the space that ends a word)
        elif escaped:
            word.append(ch)
            escaped, in_word = False, True
        elif ch == "\\":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
            else:
                word.append(ch)
        elif ch in "\"'":
            quote, in_word = ch, True
        elif ch == "#":
            break
        else:
            word.append(ch)
            in_word = True
    if quote:
        raise InvalidRequest(f"unbalanced quote in #SBATCH line: {text.strip()}", field="script")
    if in_word:
        words.append("".join(word))
    return words


def _settings_from_directives(script: str) -> list[dict[str, Setting]]:
    """The directives' settings, one dict per heterogeneous job component: an
    ``#SBATCH hetjob`` (or ``packjob``) line starts the next component."""
    components: list[dict[str, Setting]] = [{}]
    for number, text in directive_lines(script):
        parsed = _parse(
            split_directive(text), stop_at_positional=False, where=f" (script line {number})"
        )
        positionals = parsed.positionals
        if positionals and positionals[0] in _HETJOB_WORDS:
            components.append({})
            positionals = positionals[1:]
        if positionals:  # Slurm's words first ("b" for `--comment=a\ b`; rc 255 there)
            raise UnsupportedOption(
                f"Invalid directive found in batch script: {positionals[0]} (script line "
                f"{number}: HAL reads only options there, as Slurm does; quote a value with "
                'spaces: #SBATCH --comment="two words")',
                field="script",
            )
        level, _ = _settings(parsed)
        settings = components[-1]
        for dest in ADDS_UP:
            if dest in level and dest in settings:
                level[dest] = (_more_data(settings[dest][0], level[dest][0]), level[dest][1])
        for dest in level:
            if dest in ("requeue", "no_requeue"):
                settings.pop("requeue", None)
                settings.pop("no_requeue", None)
        settings.update(level)
    return components


# -- from settings to JobSubmit -----------------------------------------------------------


def _build_job(
    settings: dict[str, Setting],
    script: BatchScript,
    *,
    environ: Mapping[str, str],
    cwd: str,
    now: float,
    warnings: list[str] | None = None,
) -> dict[str, object]:
    """The job's ``body`` (see ``SbatchRequest``) from its ``settings``."""

    def value(dest: str) -> str | None:
        entry = settings.get(dest)
        return entry[0] if entry else None

    fields: dict[str, object] = {"script": script.text, "name": value("job_name") or script.name}
    if script.args:
        fields["script_args"] = list(script.args)
    if script.path is not None:
        fields["script_path"] = script.path
    chdir = value("chdir")
    fields["workdir"] = os.path.normpath(os.path.join(cwd, chdir)) if chdir else cwd
    export = value("export")
    environment = export_environment(export or "ALL", environ)
    if export is not None:  # (Slurm's sbatch tells the job's steps, srun's default)
        environment[EXPORT_VARIABLE] = export
    fields["environment"] = environment
    for dest in ("output", "error", "account", "qos", "comment", "reservation"):
        text = value(dest)
        if text is not None:
            fields[{"output": "stdout", "error": "stderr"}.get(dest, dest)] = text
    partition = value("partition")
    if partition is not None:
        names = [p.strip() for p in partition.split(",") if p.strip()]
        if not names:
            raise InvalidRequest("--partition needs a partition name", field="partition")
        fields["partition"] = ",".join(names)
    _resources(settings, fields, [] if warnings is None else warnings)
    _scheduling(settings, fields, now, environ, cwd)
    _check_no_effect(settings)
    distribution = value("distribution")
    if distribution is not None:  # what the job's sruns read (Slurm's sbatch -m)
        from hal.slurm.distribution import parse_distribution

        parse_distribution(distribution)
        environment["SLURM_DISTRIBUTION"] = distribution.strip()
    return fields


def _check_no_effect(settings: dict[str, Setting]) -> None:
    """The values of ``NO_EFFECT``'s options that have a form to check."""
    hint = settings.get("hint")
    if hint is not None and (hint[0] or "").strip() not in HINTS:
        raise InvalidRequest(
            f"{hint[1]}: {hint[0]!r} is not a hint; use {', '.join(HINTS)}", field="hint"
        )
    for dest in ("ntasks_per_core", "threads_per_core"):
        _positive(settings, dest)


def _positive(settings: dict[str, Setting], dest: str) -> int | None:
    entry = settings.get(dest)
    if entry is None:
        return None
    text, spelled = entry
    if text is None or not text.strip().isdigit() or int(text) < 1:
        raise InvalidRequest(f"{spelled} needs a positive integer, got {text!r}", field=dest)
    return int(text)


def _resources(
    settings: dict[str, Setting], fields: dict[str, object], warnings: list[str]
) -> None:
    def text(dest: str) -> str | None:
        entry = settings.get(dest)
        return entry[0] if entry else None

    cpus = text("cpus_per_task")
    if cpus is not None and "-" in cpus:  # --malleable --cpus-per-task=LO-HI
        from hal.core.malleable import parse_range

        spelled = settings["cpus_per_task"][1]
        if "malleable" not in settings:
            raise InvalidRequest(
                f"{spelled}={cpus}: a range of CPUs per task needs --malleable (the job is "
                "then resized within it); or give one number",
                field="cpus_per_task",
            )
        fields["cpus_per_task"], fields["cpus_per_task_max"] = parse_range(cpus, spelled)
        settings = {k: v for k, v in settings.items() if k != "cpus_per_task"}
    nodes = text("nodes")
    if nodes is not None:
        low, high = parse_nodes(nodes)
        fields["nodes_min"] = low
        fields["nodes_max"] = high  # sent even when equal: the server knows -N was given
    for dest in ("ntasks", "ntasks_per_node", "cpus_per_task"):
        number = _positive(settings, dest)
        if number is not None:
            fields[dest] = number
    mincpus = _positive(settings, "mincpus")
    if mincpus is not None:
        fields["min_cpus_per_node"] = mincpus
    _fit_nodes_to_tasks(fields, warnings)
    if "cpus_per_task" in fields:  # as Slurm's sbatch: set only where -c was given
        environment = fields["environment"]
        assert isinstance(environment, dict)
        environment["SLURM_CPUS_PER_TASK"] = str(fields["cpus_per_task"])
    for dest, target in (
        ("mem", "memory_per_node_bytes"),
        ("mem_per_cpu", "memory_per_cpu_bytes"),
        ("mem_per_gpu", "memory_per_gpu_bytes"),
    ):
        mem = text(dest)
        if mem is not None:
            size = parse_memory(mem, field=dest.replace("_", "-"))
            if size == 0:  # --mem-per-cpu=0 and --mem-per-gpu=0 are --mem=0, all of each
                # node's memory, as Slurm 22.05.8 takes them: MinMemoryNode=0, TRES mem=
                # the node's (--mem-per-gpu=0 with --gpus=1 too)
                target = "memory_per_node_bytes"
            fields[target] = size
    gpu_types: set[str] = set()
    gres = text("gres")
    if gres is not None:
        gpu_type, count = parse_gres(gres)
        fields["gpus_per_node"] = count
        gpu_types.update([gpu_type] if gpu_type else [])
    for dest, target in (
        ("gpus", "gpus"),
        ("gpus_per_node", "gpus_per_node"),
        ("gpus_per_task", "gpus_per_task"),
    ):
        spec = text(dest)
        if spec is not None:
            gpu_type, count = parse_gpus(spec, field=dest.replace("_", "-"))
            fields[target] = count
            gpu_types.update([gpu_type] if gpu_type else [])
    if len(gpu_types) > 1:
        raise InvalidRequest(
            f"GPU types disagree ({', '.join(sorted(gpu_types))}); ask for one GPU type",
            field="gres",
        )
    if gpu_types:
        fields["gpu_type"] = gpu_types.pop()


def _fit_nodes_to_tasks(fields: dict[str, object], warnings: list[str]) -> None:
    """No more nodes than tasks, as Slurm 22.05.8's sbatch, salloc and srun decide before
    sending: ``-N 2 -n 1`` is one node ("Warning: can't run 1 processes on 2 nodes, setting
    nnodes to 1"), ``-N 3 -n 2`` two, ``-N 2-4 -n 1`` 1-1 (the warning names the minimum)
    and ``-N 1-4 -n 2`` quietly 1-2. Without this HAL allocated (and charged) a node no
    task would use."""
    ntasks, low, high = fields.get("ntasks"), fields.get("nodes_min"), fields.get("nodes_max")
    if not (isinstance(ntasks, int) and isinstance(low, int) and isinstance(high, int)):
        return
    fields["nodes_min"], fields["nodes_max"], warning = nodes_for_tasks(ntasks, low, high)
    if warning:
        warnings.append(warning)


def nodes_for_tasks(ntasks: int, low: int, high: int) -> tuple[int, int, str]:
    """``-N low-high`` fitted to ``-n ntasks`` (``_fit_nodes_to_tasks``), and the warning
    Slurm prints when it lowers the minimum ("" when it does not)."""
    high = min(high, ntasks)
    if ntasks >= low:
        return low, max(low, high), ""
    warning = f"Warning: can't run {ntasks} processes on {low} nodes, setting nnodes to {ntasks}"
    return ntasks, ntasks, warning


def _scheduling(
    settings: dict[str, Setting],
    fields: dict[str, object],
    now: float,
    environ: Mapping[str, str],
    cwd: str,
) -> None:
    def text(dest: str) -> str | None:
        entry = settings.get(dest)
        return entry[0] if entry else None

    limit = text("time")
    if limit is not None:
        fields["time_limit_seconds"] = command_time_limit(limit, environ)
    time_min = text("time_min")
    if time_min is not None:
        fields["time_min_seconds"] = _time_min(time_min, fields.get("time_limit_seconds"), environ)
    burst_after = text("burst_after")
    if burst_after is not None:
        from hal.core.patience import parse_patience

        fields["burst_after"] = str(parse_patience(burst_after))  # (refused here if bad)
    # array, dependency and signal travel as text (the server parses them with the same
    # functions); checking the syntax here gives the error before any network round trip.
    array = text("array")
    if array is not None:
        parse_array(array, max_array_size=1 << 31)  # the size limit is the server's call
        fields["array"] = array.strip()
    dependency = text("dependency")
    if dependency is not None and dependency.strip():  # (empty: none, as Slurm's sbatch)
        parse_dependency(dependency)
        fields["dependency"] = dependency.strip()
    signal = text("signal")
    if signal is not None:
        parse_signal(signal)
        fields["signal"] = signal.strip()
    switches = text("switches")
    if switches is not None:
        parse_switches(switches)
        fields["switches"] = switches.strip()
    topology = text("topology")
    if topology is not None:
        parse_topology(topology)
        fields["topology"] = topology.strip()
    for option in ("near", "apart"):
        rules = text(option)
        if rules is not None:
            from hal.core.job_rules import parse_rules

            parse_rules([rules], option)  # sbatch's own refusal, before any round trip
            fields[option] = [rules.strip()]
    goals = text("feedback_goal")
    if goals is not None:
        from hal.core.feedback import parse_goals

        parse_goals([goals])
        fields["feedback_goal"] = [goals.strip()]
    scrape = text("feedback_metrics")
    if scrape is not None:
        from hal.core.feedback import parse_scrape

        fields["feedback_metrics"] = str(parse_scrape(scrape))
    licenses = text("licenses")
    if licenses is not None:
        parse_licenses(licenses)
        fields["licenses"] = licenses.strip()
    data = text("data")
    if data is not None:
        from hal.core.data import parse_data_keys

        fields["data"] = list(parse_data_keys(data))
    _software(text("artifact"), text("python_env"), text("container"), fields, cwd)
    mail_type = text("mail_type")
    if mail_type is not None:
        from hal.slurm.mail import parse_mail_type

        parse_mail_type(mail_type)  # sbatch's own refusal, before any round trip
        fields["mail_type"] = mail_type.strip()
    open_mode = text("open_mode")
    if open_mode is not None:
        from hal.compat.srun_output import parse_open_mode

        fields["open_mode"] = parse_open_mode(open_mode)
    wckey = text("wckey")
    if wckey is not None:
        fields["wckey"] = wckey.strip()
    mail_user = text("mail_user")
    if mail_user is not None:
        from hal.slurm.mail import check_mail_user

        fields["mail_user"] = check_mail_user(mail_user.strip())
    kill = text("kill_on_invalid_dep")
    if kill is not None:
        if kill.lower() not in ("yes", "no"):
            raise InvalidRequest(
                "--kill-on-invalid-dep takes yes or no", field="kill-on-invalid-dep"
            )
        fields["kill_on_invalid_dep"] = kill.lower() == "yes"
    constraint = text("constraint")
    if constraint is not None and constraint.strip():  # (empty: none, as Slurm's sbatch)
        fields["constraint"] = parse_constraint(constraint)
    exclude = text("exclude")
    if exclude is not None:
        fields["exclude"] = expand_hostlist(exclude, field="exclude")
    nodelist = text("nodelist")
    if nodelist is not None:
        fields["nodelist"] = _nodelist(nodelist)
    if "hold" in settings:
        fields["hold"] = True
    if "latency_sensitive" in settings:
        fields["latency_sensitive"] = True
    if "malleable" in settings:
        fields["malleable"] = True
    begin = text("begin")
    begin_time = None if begin is None else parse_begin(begin, now)
    if begin_time is not None:
        fields["begin_time"] = begin_time
    deadline = text("deadline")
    if deadline is not None:
        fields["deadline"] = ends_by = parse_begin(deadline, now, field="deadline")
        if begin_time is not None and ends_by < begin_time:
            raise InvalidRequest(
                "Incompatible begin and deadline time specification: the deadline is "
                "before --begin",
                field="deadline",
            )
    if "no_requeue" in settings:
        fields["requeue"] = False
    if "exclusive" in settings:
        sharing = job_options.exclusive(text("exclusive"))
        fields["exclusive"], fields["exclusive_user"] = sharing.exclusive, sharing.user
    if "no_kill" in settings:
        # checked and taken; HAL still ends the job when one of its nodes fails (HAL
        # cannot yet take the node out of a running job: docs/slurm-checks.md)
        job_options.no_kill(text("no_kill"))
    priority = text("priority")
    if priority is not None:
        # an administrator's sets the job's priority, as scontrol update Priority=; a
        # user's is dropped by the server, as Slurm 22.05.8 drops it (no error)
        fields["priority"] = job_options.priority(priority)
    if "nice" in settings:
        nice = text("nice")
        nice = "100" if nice is None else nice  # Slurm's adjustment when none is given
        import re  # (a rare option's: sbatch's start-up has no re, see hal.slurm.syntax)

        if not re.match(r"^[+-]?\d+$", nice.strip()):
            raise InvalidRequest(f"--nice needs an integer, got {nice!r}", field="nice")
        fields["nice"] = int(nice)


def _software(
    artifacts: str | None,
    python_env: str | None,
    container: str | None,
    fields: dict[str, object],
    cwd: str,
) -> None:
    """``--artifact``, ``--python-env`` and ``--container``, refused here (before any
    round trip) when the server would refuse them. A lock file's relative path is read
    from ``cwd`` (where the command runs)."""
    if artifacts is not None:
        from hal.core.artifacts import parse_requests

        parse_requests([artifacts])  # sbatch's own refusal, before any round trip
        fields["artifacts"] = [artifacts.strip()]
    if python_env is not None:
        from hal.core.pyenv import make_python_env, read_lock

        files = read_lock(python_env.strip(), cwd)  # read here: the server cannot see it
        make_python_env(files)  # sbatch's own refusal (an unpinned line), before the trip
        fields["python_env"] = files
    if container is not None:
        from hal.core.container import parse_container

        parse_container(container)  # sbatch's own refusal, before any round trip
        fields["container"] = container.strip()


def _time_min(text: str, limit: object, environ: Mapping[str, str]) -> int:
    """``--time-min`` in seconds (0: none), no longer than ``--time`` when that is given
    (without one, the server compares it with the limit the partition gives)."""
    seconds = command_time_limit(text, environ, field="time-min", unlimited=False)
    if seconds and isinstance(limit, int) and limit and seconds > limit:
        raise InvalidRequest(
            f"Invalid time-min specification (exceeds job's time or other limits): "
            f"--time-min={text.strip()} is longer than --time; give a --time-min no longer "
            "than --time",
            field="time-min",
        )
    return seconds


def parse_constraint(text: str) -> list[str]:
    """``-C a&b`` or ``-C a,b``: features that must all be present. Slurm's OR (``|``),
    counts (``*``) and brackets are not supported and are refused, not approximated."""
    if any(ch in text for ch in "|[]*()!"):
        raise UnsupportedOption(
            f"--constraint {text!r}: HAL supports only features that must all be present, "
            "joined with & or , (e.g. -C 'a100&ib')",
            field="constraint",
        )
    features = [f.strip() for f in text.replace("&", ",").split(",") if f.strip()]
    if not features:
        raise InvalidRequest("--constraint needs at least one feature", field="constraint")
    return features


def _nodelist(text: str) -> list[str]:
    # sbatch.1: a node list containing "/" names a file holding the list.
    if "/" in text:
        try:
            with open(text) as f:
                content = f.read()
        except OSError as err:
            raise InvalidRequest(
                f"cannot read --nodelist file {text}: {err}", field="nodelist"
            ) from None
        names: list[str] = []
        for word in content.split():
            names.extend(expand_hostlist(word))
        return names
    return expand_hostlist(text)


HELP = """\
Usage: sbatch [OPTIONS...] [script [args...]]   (HAL's Slurm-compatible sbatch)

Options HAL accepts (anything else is refused with an error):
  -J, --job-name=name        -o, --output=pattern      -e, --error=pattern
  -p, --partition=list       -N, --nodes=min[-max]     -n, --ntasks=N
      --ntasks-per-node=N    -c, --cpus-per-task=N     --mem=size  --mem-per-cpu=size
      --mem-per-gpu=size     --gres=gpu[:type]:N       -G, --gpus=[type:]N
      --gpus-per-node=[type:]N  --gpus-per-task=[type:]N
  -t, --time=limit           -a, --array=indexes       -d, --dependency=list
      --time-min=limit       backfill may lower --time to no less than this to start sooner
      --kill-on-invalid-dep=yes|no  -A, --account=name  -q, --qos=name
  -D, --chdir=dir            --export=ALL|NONE|VAR=val,...
  -C, --constraint=a&b       -x, --exclude=hosts       -w, --nodelist=hosts
  -H, --hold                 -b, --begin=time          --requeue  --no-requeue
      --signal=[R:][B:]sig[@secs]  signal the job's steps (B: the batch shell) secs
                             (default 60) before its time limit
      --exclusive[=user]     whole nodes; =user: nodes shared only with your own jobs
  -k, --no-kill[=off]        taken; HAL still ends the job when one of its nodes fails
      --priority=N|TOP       the job's priority (administrators; others' is ignored)
      --comment=text  --nice[=adj]
      --switches=N[@max-wait]  --topology=required=LEVEL|preferred=LEVEL
      --near=rule[,rule...]  near jobs: [preferred=]job:ID|name:NAME[@LEVEL] (HAL)
      --apart=rule[,rule...] away from them, the same rules (HAL)
      --feedback-goal=name:max|min[,...]  which way the job's reported metrics
                             are better (hal feedback; HAL)
      --feedback-metrics=URL[#name,...]  the job's own Prometheus endpoint on
                             its node, scraped as its feedback (HAL)
      --latency-sensitive    keep noisy neighbours away from the job first (HAL)
      --data=key[,key...]    input cache keys: placed near them, staged ahead (HAL)
      --burst-after=time|never  cloud nodes are made for it only when it would start
                             here this much later than on them (10m, 2h; HAL)
      --artifact=name[@version][,...]  published software the job runs (HAL)
      --python-env=lockfile|name@version  a Python environment built from the lock on
                             each node, or a conda-pack artifact unpacked there (HAL)
      --container=name@version|/bundle  run in this image artifact or OCI bundle (HAL)
      --reservation=name     run in this advance reservation (scontrol show res)
  -L, --licenses=list        licenses held while the job runs, e.g. matlab:2,ansys
      --mail-type=type       mail on BEGIN, END, FAIL, REQUEUE, INVALID_DEPEND, ALL,
                             TIME_LIMIT[_90|_80|_50], ARRAY_TASKS (comma list; NONE)
      --mail-user=user       where it goes (default: you, @ the cluster's mail domain)
      --wrap=command         --parsable  -W, --wait    --test-only
  -Q, --quiet  -v, --verbose  -h, --help  -V, --version
"""
