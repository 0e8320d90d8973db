"""``hal``: entry point and subcommand dispatch.

Slurm-named commands (``hal sbatch``, ``hal squeue``, ...) go to ``hal.compat`` untouched so
their flags and output match Slurm's exactly; native commands parse with argparse here.
"""

from __future__ import annotations

import os
import sys

from hal.compat.names import SLURM_COMMANDS
from hal.core.errors import HalError

# What `hal sbatch` and `hal squeue` import is their start-up time, paid once per job by
# workflow tools: ``typing``, ``signal`` and argparse come only where they are used.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

EXIT_CODES = {
    "invalid_request": 2,
    "unsupported_option": 2,
    "bad_constraints": 2,
    "unauthenticated": 3,
    "permission_denied": 3,
    "not_found": 4,
    "not_configured": 4,
    "conflict": 5,
    "payload_too_large": 2,
    "too_many_requests": 6,
    "unavailable": 6,
}


def main(argv: list[str] | None = None) -> int:
    # pydantic scans every installed distribution for plugins at import (~20 ms); the CLI
    # uses none, and a short-lived command should not pay for that scan.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # ``import httpx`` tries to import httpx's own command line (``httpx._main``: click,
    # rich and pygments, where installed; about 0.1 s of CPU); httpx falls back to a stub
    # when that import fails, which a ``None`` in ``sys.modules`` makes it do. The agent
    # and every command that talks to the server import httpx; none runs httpx's CLI.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "prio":  # `hal prio`: sprio under its short name
        args[0] = "sprio"
    if args and args[0] == "submit":  # `hal submit`: sbatch's options, all of them
        args[0] = "sbatch"
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return code
    except KeyboardInterrupt:  # Ctrl-C while the command is still loading
        return 130
    except BrokenPipeError:  # `hal sacct | head`: the reader has gone, nothing to report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush does not fail again
        return 141


def _outlive_own_requeue(args: list[str]) -> None:
    """A job that requeues itself (submitit's checkpoint runs ``scontrol requeue
    $SLURM_JOB_ID`` and checks its exit code) gets the requeue's SIGTERM while scontrol
    still waits for the answer. Slurm's C scontrol has exited by then; HAL's died of it
    (-15) and the job took its own requeue for a failure. So scontrol inside a job
    ignores SIGTERM while it requeues: the SIGKILL after KillWait still ends it."""
    if any(word.lower() in ("requeue", "requeuehold") for word in args[1:]):
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _dispatch(args: list[str]) -> int:
    if args and args[0] in SLURM_COMMANDS:
        from hal.compat.commands import run

        if args[0] == "scontrol" and "SLURM_JOB_ID" in os.environ:
            _outlive_own_requeue(args)

        return run(args[0], args[1:])
    from hal.cli.parser import build_parser

    parser = build_parser(args)
    ns, extra = parser.parse_known_args(args)
    command = _command(parser, args)
    extra = _late_positional(ns, extra)
    if extra:  # the command's usage, not the list of every command
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    if not hasattr(ns, "func"):  # `hal data`: which actions it has
        command.print_help(sys.stderr if command is not parser else sys.stdout)
        return 2
    try:
        result: int = ns.func(ns)
        return result
    except HalError as err:
        print(f"hal: error: {err.message}", file=sys.stderr)
        return exit_code(err)
    except KeyboardInterrupt:
        return 130


def exit_code(err: HalError) -> int:
    """The exit code of ``err``'s kind: a subclass with a code of its own
    (``invalid_topology``, ``database_unavailable``) exits as the class it refines."""
    for cls in type(err).__mro__:
        code = EXIT_CODES.get(getattr(cls, "code", ""))
        if code is not None:
            return code
    return 1


def _late_positional(ns: argparse.Namespace, extra: list[str]) -> list[str]:
    """A command's optional last positional (``late_positional``: its dest) given after an
    option (``hal artifact push NAME@1 --kind image FILE``): Python 3.11's argparse
    leaves it unparsed (it fills an optional positional with nothing at the first one)."""
    dest = getattr(ns, "late_positional", "")
    if not dest or getattr(ns, dest, None) is not None or len(extra) != 1:
        return extra
    if extra[0].startswith("-"):
        return extra
    setattr(ns, dest, getattr(ns, "late_positional_type", str)(extra[0]))
    return []


def _command(parser: argparse.ArgumentParser, args: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` names: ``hal topology show`` → its own."""
    import argparse

    for word in args:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found: argparse.ArgumentParser | None = subs[0].choices.get(word) if subs else None
        if found is None:
            break
        parser = found
    return parser


if __name__ == "__main__":
    sys.exit(main())
