"""The getopt_long rules Slurm users and tools rely on without noticing."""

from __future__ import annotations

import pytest

from hal.compat.options import Arg, Opt, OptionError, parse_options

TABLE = (
    Opt("jobs", ("jobs",), "j", Arg.OPTIONAL),
    Opt("json", ("json",), arg=Arg.NONE),
    Opt("hold", ("hold",), "H", Arg.NONE),
    Opt("quiet", ("quiet",), "Q", Arg.NONE),
    Opt("nodes", ("nodes",), "N"),
    Opt("nodelist", ("nodelist",), "w"),
    Opt("time", ("time",), "t"),
)


def values(argv: list[str], **kw: bool) -> list[tuple[str, str | None]]:
    return [(d, v) for d, v, _ in parse_options(argv, TABLE, **kw).values]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--nodes=2"], [("nodes", "2")]),
        (["--nodes", "2"], [("nodes", "2")]),
        (["-N2"], [("nodes", "2")]),
        (["-N", "2"], [("nodes", "2")]),
        (["-HQ"], [("hold", None), ("quiet", None)]),
        (["-HN3"], [("hold", None), ("nodes", "3")]),
        (["--time", "-1"], [("time", "-1")]),  # a required value may start with "-"
        (["--job", "1,2"], [("jobs", None)]),  # Parsl's abbreviation; value is positional
        (["--jobs=1,2"], [("jobs", "1,2")]),
        (["-j1,2"], [("jobs", "1,2")]),
        (["--js"], [("json", None)]),
    ],
)
def test_getopt_forms(argv: list[str], expected: list[tuple[str, str | None]]) -> None:
    assert values(argv) == expected


def test_abbreviation_reports_full_name() -> None:
    parsed = parse_options(["--nodel", "n1"], TABLE)
    assert parsed.values == (("nodelist", "n1", "--nodelist"),)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node", "1"], "ambiguous"),
        (["--bogus"], "unrecognized option '--bogus'"),
        (["-Z"], "invalid option -- 'Z'"),
        (["--nodes"], "requires an argument"),
        (["-N"], "requires an argument"),
        (["--hold=yes"], "doesn't allow an argument"),
    ],
)
def test_getopt_errors(argv: list[str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options(argv, TABLE)


def test_permutes_unless_told_to_stop() -> None:
    parsed = parse_options(["a", "-H", "b"], TABLE)
    assert parsed.positionals == ("a", "b")
    assert [v[0] for v in parsed.values] == ["hold"]
    stopped = parse_options(["-H", "job.sh", "-N", "2"], TABLE, stop_at_positional=True)
    assert stopped.positionals == ("job.sh", "-N", "2")


def test_double_dash_ends_options() -> None:
    assert parse_options(["--", "-H"], TABLE).positionals == ("-H",)


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [(["--bogus"], True), (["-Z"], True), (["--nodes"], False), (["--hold=yes"], False)],
)
def test_getopt_errors_tell_unknown_options_apart(argv: list[str], unknown: bool) -> None:
    """A missing value is not an unsupported option (sbatch words them differently)."""
    with pytest.raises(OptionError) as err:
        parse_options(argv, TABLE)
    assert err.value.unknown is unknown
