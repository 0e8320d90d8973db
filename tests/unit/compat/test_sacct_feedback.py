"""``sacct -o Feedback``: the latest values a job reported (hal feedback), ``name=value``
by name on the job's line, blank on its steps' and for a job that reported nothing; and
``--feedback-goal`` in sbatch and ``#HAL`` lines, checked before anything is sent."""

from __future__ import annotations

import pytest
from compat_fakes import T0, FakeClient, call, job

from hal.compat.sbatch import parse_sbatch
from hal.core.errors import InvalidRequest
from hal.wire.feedback import FeedbackMetric, JobFeedback
from hal.wire.submit import non_defaults

ENDED = {"state": "COMPLETED", "start_time": T0, "end_time": T0 + 60, "nodes": ["n1"]}


def _metric(name: str, latest: float) -> FeedbackMetric:
    return FeedbackMetric(name=name, goal=None, count=3, latest=latest, latest_time=T0)


def test_the_latest_values_by_name_on_the_jobs_line_only() -> None:
    reported = JobFeedback(
        id=1, job_id="1", metrics=[_metric("latency_ms", 12.5), _metric("samples_per_s", 1830)]
    )
    client = FakeClient(job_list=[job(1, **ENDED), job(2, **ENDED)], feedback={1: reported})
    out = call(client, "sacct", "-P", "-n", "-X", "-o", "JobID,Feedback", "-j", "1,2").lines
    assert out == ["1|latency_ms=12.5,samples_per_s=1830", "2|"]


def test_no_feedback_column_asks_the_server_nothing() -> None:
    class Refusing(FakeClient):
        def feedback_latest(self, job_ids: object) -> dict[int, JobFeedback]:
            raise AssertionError("asked without a Feedback column")

    out = call(
        Refusing(job_list=[job(1, **ENDED)]), "sacct", "-P", "-n", "-X", "-o", "JobID", "-j", "1"
    )
    assert out.lines == ["1"]


def _parse(*argv: str, script: str = "#!/bin/bash\necho hi\n") -> dict[str, object]:
    request = parse_sbatch(list(argv), environ={}, cwd="/w", read_stdin=lambda: script, now=0.0)
    return non_defaults(request.job)


def test_feedback_goals_from_options_and_hal_lines_add_up() -> None:
    assert _parse("--feedback-goal=samples_per_s:max")["feedback_goal"] == ["samples_per_s:max"]
    script = "#!/bin/bash\n#HAL --feedback-goal=a:max\n#SBATCH --feedback-goal b:min\necho\n"
    assert _parse(script=script)["feedback_goal"] == ["a:max,b:min"]
    assert "feedback_goal" not in _parse()


@pytest.mark.parametrize("goal", ["samples_per_s", "x:best", "bad-name:max"])
def test_a_bad_goal_is_refused_before_sending(goal: str) -> None:
    with pytest.raises(InvalidRequest, match=r"feedback-goal|not allowed"):
        _parse(f"--feedback-goal={goal}")
