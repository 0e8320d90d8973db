"""What every command prints for ``--version`` (and ``-V`` where Slurm has it).

Slurm's commands all print one line, ``slurm-wlm 22.05.8`` from Debian's build (``slurm
22.05.8`` from Slurm's own), and exit 0; tools read the release from the second word
(``awk '{print $2}'``, ``slurm (\\d+)\\.(\\d+)``). HAL's line keeps those two words and says
it is HAL after them: ``slurm 22.05.8 (HAL)``, as sbatch, salloc and sacctmgr have printed
it from the start, so a script can still tell the two apart.
"""

from __future__ import annotations

from hal.compat.options import Arg, Opt, OptionError, parse_options

SLURM_COMPAT_VERSION = "22.05.8"  # the Slurm release whose output these commands copy
VERSION_LINE = f"slurm {SLURM_COMPAT_VERSION} (HAL)"
VERSION_OPTION = Opt("version", ("version",), "V", Arg.NONE)


def asks_version(argv: list[str], table: tuple[Opt, ...]) -> bool:
    """Whether ``--version``/``-V`` comes among a command's options before its first
    positional (srun's command), read with the command's own option ``table`` so that an
    option's value (``srun -J -V``) is not taken for it. A command line the table cannot
    parse does not ask: the command reports its error as usual."""
    try:
        parsed = parse_options(argv, (*table, VERSION_OPTION), stop_at_positional=True)
    except OptionError:
        return False
    return any(dest == VERSION_OPTION.dest for dest, _, _ in parsed.values)
