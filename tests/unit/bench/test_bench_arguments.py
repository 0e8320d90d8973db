"""The benches' list options: a typo is argparse's usage error naming the option and what
it takes, before any replay starts, not a traceback after the first trace loaded."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hal.cli.main import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["sim", "--cases", "sdsc"],
            "argument --cases: unknown sdsc; choose from sdsc-sp2, cea-curie",
        ),
        (["sim", "--cases", ","], "argument --cases: name at least one of sdsc-sp2, cea-curie"),
        (["predict", "--cases", "kth"], "unknown kth; choose from sdsc-sp2, kth-sp2, ctc-sp2"),
        (["predict", "--seeds", "0,one"], "argument --seeds: expected whole numbers separated"),
        (["data", "--seeds", ""], "argument --seeds: name at least one number"),
    ],
)
def test_a_bad_list_is_a_usage_error(capsys: Any, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", *argv, "--json"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert message in err


def test_predict_names_what_first_jobs_takes(capsys: Any) -> None:
    with pytest.raises(SystemExit, match=r"--first-jobs takes a count .* not 'hpc2n:5'"):
        main(["bench", "predict", "--cases", "hpc2n", "--first-jobs", "hpc2n:5", "--json"])
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--procs", "100"], "--procs and --cores-per-node describe the machine of --trace"),
        (["--trace", "nowhere.swf"], "no trace nowhere.swf (--trace takes an SWF file)"),
        (["--first-jobs", "-1"], "--first-jobs takes a count of jobs, not -1"),
    ],
)
def test_replay_cost_refuses_options_that_name_no_replay(
    capsys: Any, argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["bench", "replay-cost", *argv, "--json"])
    assert capsys.readouterr().out == ""
