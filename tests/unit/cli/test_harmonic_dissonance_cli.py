"""``hal harmonic dissonance`` and ``hal harmonic eval``: parsed, and their tables drawn
from the REST objects (the server side: tests/unit/server/test_dissonance_service.py)."""

from __future__ import annotations

from hal.cli.harmonic import cmd_dissonance, cmd_eval, draw_dissonance, draw_eval
from hal.cli.parser import build_parser
from hal.wire.harmonic import Dissonance, DissonanceCell, DissonanceEval, EvalFigures


def test_both_commands_parse_with_json() -> None:
    ns = build_parser().parse_args(["harmonic", "dissonance", "--json"])
    assert ns.func is cmd_dissonance and ns.json
    ns = build_parser().parse_args(["harmonic", "eval"])
    assert ns.func is cmd_eval and not ns.json


def test_the_matrix_table_has_a_row_per_victim_with_counts() -> None:
    model = Dissonance(
        classes=["cpu", "memory"],
        prior=1.05,
        outcomes_learnt=12,
        cells=[
            DissonanceCell(victim="cpu", aggressor="cpu", slowdown=1.05, observations=0),
            DissonanceCell(victim="cpu", aggressor="memory", slowdown=1.36, observations=7),
            DissonanceCell(victim="memory", aggressor="cpu", slowdown=1.2, observations=3),
            DissonanceCell(victim="memory", aggressor="memory", slowdown=1.94, observations=9),
        ],
    )
    lines = draw_dissonance(model).splitlines()
    assert lines[1].split() == ["VICTIM", "CPU", "MEMORY"]
    assert lines[2].split() == ["cpu", "1.05", "(0)", "1.36", "(7)"]
    assert lines[3].split() == ["memory", "1.20", "(3)", "1.94", "(9)"]
    assert "12 job ends learnt" in lines[-1] and "prior (1.05)" in lines[-1]


def test_the_eval_table_shows_errors_and_dashes_where_nothing_was_seen() -> None:
    seen = EvalFigures(outcomes=40, mae=0.031, baseline_mae=0.12)
    none = EvalFigures(outcomes=0, mae=None, baseline_mae=None)
    text = draw_eval(
        DissonanceEval(window=1000, all=seen, shared=seen, by_class={"cpu": seen, "io": none})
    )
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines()[2:]}
    assert rows["all"][-3:] == ["40", "0.031", "0.120"]
    assert rows["io"][-3:] == ["0", "-", "-"]
    assert "last 1000 job ends" in text
