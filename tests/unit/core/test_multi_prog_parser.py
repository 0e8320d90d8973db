"""``srun --multi-prog`` files (``hal.slurm.multi_prog``): each rank's command line and
srun's refusals, each case as Slurm 22.05.8's srun ran or refused it
(docs/slurm-checks.md, srun)."""

from __future__ import annotations

import pytest

from hal.core.errors import InvalidRequest
from hal.slurm.multi_prog import parse_multi_prog


def commands(text: str, ntasks: int, extra: tuple[str, ...] = ()) -> list[list[str]]:
    return parse_multi_prog(text, "mp.conf").argv(ntasks, extra)


def refusal(text: str, ntasks: int) -> list[str]:
    with pytest.raises(InvalidRequest) as err:
        parse_multi_prog(text, "mp.conf").argv(ntasks)
    return err.value.message.splitlines()


def test_ranks_ranges_offsets_and_comments() -> None:
    text = "# comment\n0      echo zero %t %o\n1-2    echo mid t=%t o=%o\n3 sh -c 'echo $X'\n"
    assert commands(text, 4) == [
        ["echo", "zero", "0", "0"],
        ["echo", "mid", "t=1", "o=0"],
        ["echo", "mid", "t=2", "o=1"],
        ["sh", "-c", "echo $X"],
    ]


def test_comma_lists_count_offsets_across_the_line() -> None:
    assert commands("0-1,3 echo a %t %o\n2 echo b\n", 4) == [
        ["echo", "a", "0", "0"],
        ["echo", "a", "1", "1"],
        ["echo", "b"],
        ["echo", "a", "3", "2"],
    ]


def test_star_takes_the_ranks_left_and_its_offset_is_the_rank() -> None:
    assert commands("1 echo one %t %o\n* echo star %t %o\n", 4) == [
        ["echo", "star", "0", "0"],
        ["echo", "one", "1", "0"],
        ["echo", "star", "2", "2"],
        ["echo", "star", "3", "3"],
    ]


def test_quotes_backslashes_and_percent_signs() -> None:
    """Single quotes and backslashes keep blanks and % as written; double quotes are
    plain characters; % before anything but t or o goes with it (a blank too); a # after
    the program is an argument; tabs separate words."""
    text = "0 a \"a b\" c\n1 a 'a b' c\n2 a a\\ b c # d\n3 a x'y z'w %t%o %%t %s 100% %x\n"
    assert commands(text, 4) == [
        ["a", '"a', 'b"', "c"],
        ["a", "a b", "c"],
        ["a", "a b", "c", "#", "d"],
        ["a", "xy zw", "30", "t", "", "100"],
    ]
    assert commands("0 a A '%t' \"%o\" \\%t 5%t\n", 1) == [["a", "A", "%t", '"0"', "%t", "50"]]
    assert commands("0\ta\t%t\n", 1) == [["a", "0"]]


def test_arguments_after_the_file_go_after_each_line_s_unchanged() -> None:
    assert commands("0 echo x\n* echo y\n", 2, ("e%t",)) == [
        ["echo", "x", "e%t"],
        ["echo", "y", "e%t"],
    ]


@pytest.mark.parametrize(
    ("text", "ntasks", "lines"),
    [
        (
            "0 echo a\n2-3 echo b\n",
            4,
            ["Configuration file mp.conf invalid, no record for task id 1"],
        ),
        ("# only\n", 4, ["Configuration file mp.conf invalid, no record for task id 0"]),
        (
            "0-1 echo a\n1-3 echo b\n",
            4,
            ["Duplicate record for task 1", "Line 2 of configuration file mp.conf invalid"],
        ),
        (
            "0-5 echo a\n",
            4,
            ["Invalid task id, 5 >= ntasks", "Line 1 of configuration file mp.conf invalid"],
        ),
        (
            "# c\n0 echo\n1-2 echo\n",
            2,
            ["Invalid task id, 2 >= ntasks", "Line 3 of configuration file mp.conf invalid"],
        ),
    ],
)
def test_a_rank_missing_or_out_of_place_is_refused(
    text: str, ntasks: int, lines: list[str]
) -> None:
    assert refusal(text, ntasks) == lines


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        (
            "x echo x\n* echo y\n",
            [
                "Invalid task range specification (x)",
                "Line 1 of configuration file mp.conf invalid",
            ],
        ),
        (
            "2-1 echo a\n* echo b\n",
            ["Invalid task range, 2-1", "Line 1 of configuration file mp.conf invalid"],
        ),
        ("0 echo a\n\n3\n", ["Line 3 of configuration file mp.conf invalid"]),
    ],
)
def test_a_bad_line_is_refused_whatever_the_task_count(text: str, lines: list[str]) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_multi_prog(text, "mp.conf")
    assert err.value.message.splitlines() == lines


def test_the_highest_rank_gives_the_task_count_srun_takes_without_n() -> None:
    assert parse_multi_prog("0 a\n1-3 b\n", "f").highest_rank() == 3
    assert parse_multi_prog("1 a\n* b\n", "f").highest_rank() == 1
    assert parse_multi_prog("* b\n", "f").highest_rank() is None
