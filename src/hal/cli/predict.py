"""``hal predict status``: the server's predictor (model age, data size, recent accuracy).

``hal predict eval``: how well each run-time predictor would have done on a history.
The history is an SWF trace (``--trace``) or the server's accounting: its last ``--last``
runs (50,000: what the server's predictor replays), read a page at a time. Each job is
predicted at its submission, knowing only the jobs that had ended by then
(``hal.predict.evaluate``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hal.core.errors import InvalidRequest

PREDICTORS = ("user", "avg2", "learned")
# the runs read from the server by default: the last ones, as many as its predictor
# replays at start-up (``hal.server.predictions.HISTORY_LIMIT``)
SERVER_HISTORY = 50_000
PAGE = 5000  # runs per request (the server's largest page)


def add_commands(sub: Any) -> None:
    pr = sub.add_parser("predict", help="run-time predictors: the server's, and evaluations")
    psub = pr.add_subparsers(metavar="COMMAND")
    p = psub.add_parser("status", help="the server's predictor: model, data, recent accuracy")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = psub.add_parser("eval", help="replay a history through the predictors")
    p.add_argument("--trace", metavar="SWF", help="an SWF trace (default: the server's history)")
    p.add_argument(
        "--first-jobs", type=int, default=0, metavar="K", help="cut the trace (with --trace)"
    )
    p.add_argument(
        "--last",
        type=int,
        default=None,
        metavar="N",
        help=f"without --trace: the last N runs of the server's history (default {SERVER_HISTORY})",
    )
    p.add_argument("--predictors", default=",".join(PREDICTORS), help=f"of {', '.join(PREDICTORS)}")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)


def _make(name: str) -> Any:
    from hal.predict import make_predictor

    try:
        return make_predictor(name)
    except ValueError as err:
        raise InvalidRequest(str(err)) from None


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# which jobs `hal predict status`'s figure covers (hal.server.predictions.accuracy)
RECENT_COVERS = (
    "that had an estimate (a time limit or history: one planned as unlimited is left "
    "out), each as predicted when it started"
)


def _model(st: Any) -> str:
    """The server's model: its age and data, or when the first comes and what answers
    until then (the learned predictor trains only once enough jobs have finished)."""
    if st.model_version:
        return (
            f"version {st.model_version}, trained on {st.trained_on} jobs, "
            f"{_age(st.model_age_seconds)} old ({st.model_source})"
        )
    if st.predictor != "learned":
        return "none (it needs none)"
    first = int(st.details.get("min_train", 0))
    when = f"after {first} finished jobs ({st.finished_jobs_seen} so far)" if first else "later"
    return f"none yet: its first is trained {when}; until then it answers like avg2"


def cmd_status(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        st = client.predict_status()
    if ns.json:
        print(st.model_dump_json(indent=2))
        return 0
    lines = [
        ("predictor", st.predictor),
        ("model", _model(st)),
        ("persisted in", st.model_path or "- (not persisted)"),
        (
            "jobs seen",
            f"{st.finished_jobs_seen} finished ({st.replayed_jobs} from the history, replayed "
            "at start-up)",
        ),
    ]
    if st.replaying:
        lines.append(("replay", "still reading the accounting history"))
    r = st.recent
    if r.jobs:
        lines.append(
            (
                "recent accuracy",
                f"MAE {r.mae_seconds:.0f} s, accuracy {r.accuracy:.3f}, under-predicted "
                f"{r.underprediction_rate:.1%}",
            )
        )
        lines.append(("covering", f"the last {r.jobs} finished jobs {RECENT_COVERS}"))
    else:
        lines.append(("recent accuracy", f"no finished job yet {RECENT_COVERS}"))
    if st.last_error:
        lines.append(("last error", st.last_error))
    for key, value in lines:
        print(f"{key:>16}: {value}")
    return 0


def _trace_history(path: str, first_jobs: int) -> list[Any]:
    from hal.sim.history import trace_history
    from hal.sim.workload import Cleaning, load_workload

    return trace_history(load_workload(path, Cleaning(first_jobs=first_jobs)))


def _server_history(last: int) -> list[Any]:
    """The last ``last`` runs of the server's accounting, read a page at a time."""
    from hal.client import HalClient

    out: list[Any] = []
    before: tuple[float, int] | None = None
    with HalClient() as client:
        while len(out) < last:
            size = min(PAGE, last - len(out))
            page = client.predict_history(size, before)
            out.extend(f for f in map(finished_run, page) if f is not None)
            if len(page) < size:
                break
            end = page[-1].end_time
            assert end is not None  # (a run that ended)
            before = (end, page[-1].id)
    return out


def finished_run(info: Any) -> Any:
    """The ``Finished`` of a job of the server's accounting (a ``JobInfo``), or None for
    one that did not run to an end. Its run time leaves out the time it spent suspended,
    as the server's predictor and its accuracy figures do."""
    from hal.core.job import Job, JobSpec
    from hal.core.states import JobState
    from hal.predict.evaluate import Finished

    if info.start_time is None or info.end_time is None:
        return None
    spec = JobSpec(
        user=info.user,
        script="",
        name=info.name,
        account=info.account,
        qos=info.qos,
        ntasks=info.ntasks,
        cpus_per_task=info.cpus_per_task,
        nodes_min=max(info.node_count, 1),
        nodes_max=max(info.node_count, 1),
    )
    job = Job(
        id=info.id,
        spec=spec,
        partition=info.partition,
        state=JobState[info.state],
        submit_time=info.submit_time,
        time_limit_s=info.time_limit_seconds,
    )
    runtime = max(info.end_time - info.start_time - info.suspended_seconds, 0.0)
    return Finished(job, runtime, info.end_time)


def cmd_eval(ns: argparse.Namespace) -> int:
    from hal.predict.evaluate import evaluate

    names = [n.strip() for n in ns.predictors.split(",") if n.strip()]
    if not names:
        raise InvalidRequest(f"--predictors names none; give some of {', '.join(PREDICTORS)}")
    if ns.first_jobs and not ns.trace:
        raise InvalidRequest(
            "--first-jobs cuts a trace: give it with --trace (--last N for the server's history)"
        )
    if ns.last is not None and ns.trace:
        raise InvalidRequest(
            "--last counts the server's history: cut a --trace with --first-jobs K instead"
        )
    last = SERVER_HISTORY if ns.last is None else ns.last
    if last < 1:
        raise InvalidRequest(f"--last takes a number of runs (1 or more), not {last}")
    predictors = [_make(n) for n in names]
    history = _trace_history(ns.trace, ns.first_jobs) if ns.trace else _server_history(last)
    results = [evaluate(history, p) for p in predictors]
    if ns.json:
        print(json.dumps({"jobs": len(history), "predictors": results}, indent=2))
        return 0
    source = (
        f"of {ns.trace}" if ns.trace else f"of the server's accounting (its last {last:,} runs)"
    )
    for line in eval_notes(history, predictors, source):
        print(line)
    print(f"{'PREDICTOR':<10} {'MAE(s)':>10} {'ACCURACY':>9} {'UNDER':>7} {'PREDICT(us)':>12}")
    for r in results:
        if not r["jobs"]:
            print(f"{r['predictor']:<10} no finished jobs")
            continue
        print(
            f"{r['predictor']:<10} {r['mae_s']:>10.0f} {r['accuracy']:>9.3f} "
            f"{r['underprediction_rate']:>7.1%} {r['predict_us_per_job']:>12.1f}"
        )
    return 0


def eval_notes(history: list[Any], predictors: list[Any], source: str) -> list[str]:
    """Which jobs ``hal predict eval``'s figures cover, and why they may differ from
    ``hal predict status``'s: every job of the history, those without a time limit
    included (a predictor with nothing else to go on plans them as a year: one such job
    weighs more in the MAE than a thousand good guesses), each predicted at its
    submission; status covers the server's last finished jobs with an estimate, each as
    predicted when it started. And when the learned model started, if it did."""
    unlimited = sum(1 for f in history if f.job.time_limit_s <= 0)
    lines = [
        f"{len(history)} finished jobs {source}, each predicted at its submission from the "
        "jobs that had ended by then"
    ]
    if unlimited:
        lines.append(
            f"  {unlimited} of them had no time limit: without history a predictor plans such "
            "a job as a year, which swamps the MAE (`hal predict status` leaves those out)"
        )
    for p in predictors:
        first = getattr(p, "min_train", None)
        if first is None:
            continue
        reached = "reached" if getattr(p, "model_version", 0) else "not reached"
        lines.append(
            f"  {p.name}: trains its first model after {first} finished jobs ({reached} "
            "here) and answers like avg2 until then"
        )
    return lines
