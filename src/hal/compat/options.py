"""A getopt_long work-alike for the Slurm commands.

Slurm parses its options with glibc's ``getopt_long``, and tools lean on its quirks: Parsl
writes ``squeue --job 1,2`` (an abbreviation of ``--jobs``), users combine short flags
(``-HQ``) and glue values (``-N2``, ``-tall``). Python's ``argparse`` differs in small ways
(its own error text, values that start with ``-``), so the commands use this instead.

Rules, as getopt_long:
- ``--name=value`` or ``--name value`` for options with a required value; options with an
  optional value take it only as ``--name=value`` (or glued, ``-jVALUE``).
- A long name may be abbreviated to any unique prefix; an exact name always wins.
- ``-abc`` is ``-a -b -c`` until a letter that takes a value; the rest is its value.
- ``--`` ends the options. With ``stop_at_positional`` (sbatch), the first positional ends
  them too and everything after it belongs to the script; otherwise options and positionals
  may mix (getopt's permutation).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar


class Arg:
    """Whether an option takes a value: ``Arg.NONE``, ``Arg.REQUIRED`` or ``Arg.OPTIONAL``,
    three values compared by identity. (Not an ``Enum``: ``enum`` is a tenth of a bare
    interpreter's start, which sbatch and squeue have no room for; see ``hal.compat``.)"""

    __slots__ = ("name",)

    NONE: ClassVar[Arg]
    REQUIRED: ClassVar[Arg]
    OPTIONAL: ClassVar[Arg]

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Arg.{self.name}"


Arg.NONE, Arg.REQUIRED, Arg.OPTIONAL = Arg("NONE"), Arg("REQUIRED"), Arg("OPTIONAL")


class Opt:
    """One option: ``dest`` is the key its values are stored under.

    (A plain class, as ``Parsed``: every Slurm command loads this module, and sbatch's
    and squeue's start-up has no room for ``dataclasses``; see ``hal.compat``.)"""

    __slots__ = ("arg", "dest", "long", "short")

    def __init__(
        self, dest: str, long: tuple[str, ...] = (), short: str = "", arg: Arg = Arg.REQUIRED
    ) -> None:
        self.dest = dest
        self.long = long
        self.short = short
        self.arg = arg


# The job's resources, its name and environment: options sbatch and srun both take.
RESOURCE_OPTIONS = (
    Opt("job_name", ("job-name",), "J"),
    Opt("nodes", ("nodes",), "N"),
    Opt("ntasks", ("ntasks",), "n"),
    Opt("ntasks_per_node", ("ntasks-per-node",)),
    Opt("cpus_per_task", ("cpus-per-task",), "c"),
    Opt("mem", ("mem",)),
    Opt("mem_per_cpu", ("mem-per-cpu",)),
    Opt("mem_per_gpu", ("mem-per-gpu",)),
    Opt("gres", ("gres",)),
    Opt("gpus", ("gpus",), "G"),
    Opt("gpus_per_node", ("gpus-per-node",)),
    Opt("gpus_per_task", ("gpus-per-task",)),
    Opt("time", ("time",), "t"),
    Opt("export", ("export",)),
)


# Taken with no effect by sbatch, salloc and srun, as Slurm takes them where they do not
# apply (hints about hardware threads, binding, frequencies, profiling and sharing, on a
# cluster that has none of them): a script written for a Slurm site runs unchanged.
HINT_OPTIONS = (
    Opt("hint", ("hint",)),
    Opt("ntasks_per_core", ("ntasks-per-core",)),
    Opt("threads_per_core", ("threads-per-core",)),
    Opt("cpu_freq", ("cpu-freq",)),
    Opt("mem_bind", ("mem-bind", "mem_bind")),
    Opt("gpu_bind", ("gpu-bind",)),
    Opt("gpu_freq", ("gpu-freq",)),
    Opt("acctg_freq", ("acctg-freq",)),
    Opt("profile", ("profile",)),
    Opt("propagate", ("propagate",), arg=Arg.OPTIONAL),
    Opt("oversubscribe", ("oversubscribe",), "s", Arg.NONE),  # (HAL never shares CPUs)
    Opt("spread_job", ("spread-job",), arg=Arg.NONE),
)


class Parsed:
    """``values``: (dest, value or None, the spelling the user typed) in command-line order."""

    __slots__ = ("positionals", "values")

    def __init__(
        self, values: tuple[tuple[str, str | None, str], ...], positionals: tuple[str, ...]
    ) -> None:
        self.values = values
        self.positionals = positionals


class OptionError(Exception):
    """A malformed or unknown option; ``option`` is how the user wrote it. ``unknown``: no
    option of that name (else it exists but its value is missing or not allowed)."""

    def __init__(self, message: str, option: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.option = option
        self.unknown = unknown

    def for_command(self, command: str) -> str:
        """The line a command prints: "does not support it" only for an unknown option; a
        known option missing its value (or given one it takes none of) is the user's slip."""
        if self.unknown:
            return f"{self.message}: HAL's {command} does not support it"
        return self.message


def parse_options(
    argv: list[str], table: tuple[Opt, ...], *, stop_at_positional: bool = False
) -> Parsed:
    by_long = {name: opt for opt in table for name in opt.long}
    by_short = {opt.short: opt for opt in table if opt.short}
    values: list[tuple[str, str | None, str]] = []
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            positionals.extend(argv[i:])
            break
        if word.startswith("--"):
            name, eq, inline = word[2:].partition("=")
            opt, full = _lookup_long(name, by_long, word)
            spelled = "--" + full
            if opt.arg is Arg.NONE:
                if eq:
                    raise OptionError(f"option '--{name}' doesn't allow an argument", word)
                values.append((opt.dest, None, spelled))
            elif eq:
                values.append((opt.dest, inline, spelled))
            elif opt.arg is Arg.OPTIONAL:
                values.append((opt.dest, None, spelled))
            else:
                if i >= len(argv):
                    raise OptionError(f"option '--{name}' requires an argument", word)
                values.append((opt.dest, argv[i], spelled))
                i += 1
        elif word.startswith("-") and word != "-":
            i = _short_cluster(word, argv, i, by_short, values)
        else:
            positionals.append(word)
            if stop_at_positional:
                positionals.extend(argv[i:])
                break
    return Parsed(tuple(values), tuple(positionals))


def _lookup_long(name: str, by_long: dict[str, Opt], word: str) -> tuple[Opt, str]:
    """The option and its full name; an exact name wins over prefixes."""
    if name in by_long:
        return by_long[name], name
    keys = [key for key in by_long if name and key.startswith(name)]
    distinct = {id(by_long[key]) for key in keys}
    if len(distinct) == 1:
        return by_long[keys[0]], keys[0]
    if keys:
        choices = " ".join("--" + key for key in sorted(keys))
        raise OptionError(f"option '--{name}' is ambiguous; possibilities: {choices}", word)
    raise OptionError(f"unrecognized option '--{name}'", word, unknown=True)


def _short_cluster(
    word: str,
    argv: list[str],
    i: int,
    by_short: dict[str, Opt],
    values: list[tuple[str, str | None, str]],
) -> int:
    letters = word[1:]
    for pos, letter in enumerate(letters):
        opt = by_short.get(letter)
        if opt is None:
            raise OptionError(f"invalid option -- '{letter}'", "-" + letter, unknown=True)
        rest = letters[pos + 1 :]
        if opt.arg is Arg.NONE:
            values.append((opt.dest, None, "-" + letter))
            continue
        if rest:
            values.append((opt.dest, rest, "-" + letter))
        elif opt.arg is Arg.OPTIONAL:
            values.append((opt.dest, None, "-" + letter))
        else:
            if i >= len(argv):
                raise OptionError(f"option requires an argument -- '{letter}'", "-" + letter)
            values.append((opt.dest, argv[i], "-" + letter))
            i += 1
        break
    return i
