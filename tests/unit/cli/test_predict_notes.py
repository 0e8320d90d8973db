"""`hal predict status` (MAE 8 s) and `hal predict eval` (MAE 1,855,068 s for avg2)
disagreed without a word: they cover different jobs. Each now says which, and when the
learned model starts (before it, it answers like avg2)."""

from __future__ import annotations

from hal.cli.predict import _model, eval_notes
from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.predict import make_predictor
from hal.predict.evaluate import Finished, evaluate
from hal.wire.predict import PredictStatus


def test_status_before_the_first_model_says_when_it_comes_and_what_answers_till_then() -> None:
    st = PredictStatus(predictor="learned", finished_jobs_seen=12, details={"min_train": 200.0})
    assert _model(st) == (
        "none yet: its first is trained after 200 finished jobs (12 so far); until then it "
        "answers like avg2"
    )
    trained = PredictStatus(predictor="learned", model_version=3, trained_on=900,
                            model_age_seconds=7200, model_source="live")  # fmt: skip
    assert _model(trained) == "version 3, trained on 900 jobs, 2.0 h old (live)"
    assert _model(PredictStatus(predictor="avg2")) == "none (it needs none)"


def finished(i: int, limit: int) -> Finished:
    job = Job(id=i, spec=JobSpec(user="u", script="", name="n"), partition="debug",
              state=JobState.COMPLETED, submit_time=100.0 * i, time_limit_s=limit)  # fmt: skip
    return Finished(job, 30.0, 100.0 * i + 30)


def test_eval_names_the_jobs_it_covers_those_without_a_limit_and_the_models_start() -> None:
    history = [finished(i, 0 if i % 3 == 0 else 600) for i in range(1, 31)]
    learned = make_predictor("learned")
    evaluate(history, learned)
    assert eval_notes(history, [make_predictor("avg2"), learned], "of t.swf") == [
        "30 finished jobs of t.swf, each predicted at its submission from the jobs that had "
        "ended by then",
        "  10 of them had no time limit: without history a predictor plans such a job as a "
        "year, which swamps the MAE (`hal predict status` leaves those out)",
        "  learned: trains its first model after 200 finished jobs (not reached here) and "
        "answers like avg2 until then",
    ]
