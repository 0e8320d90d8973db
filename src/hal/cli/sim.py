"""``hal sim run|compare|report``: replay SWF traces through the real scheduler.

``add_commands(sub)`` registers the commands on the ``hal`` parser's subparsers (wired
in ``cli/parser.py``). Runs locally: no server is involved.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hal.core.errors import HalError, InvalidRequest

RESULT_SUFFIX = ".result.json"


def add_commands(sub: Any) -> None:
    sim = sub.add_parser("sim", help="trace-driven simulation (SWF) with the real scheduler")
    ssub = sim.add_subparsers(metavar="COMMAND")

    p = ssub.add_parser("run", help="replay one trace under one policy")
    p.add_argument("trace", help="an SWF file (.swf or .swf.gz)")
    p.add_argument("--policy", default="easy", help="fcfs, easy, conservative, easy-sjbf")
    _common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--swf-out", metavar="FILE", help="write per-job results as SWF")
    p.add_argument("--save", metavar="FILE", help="save the run for `hal sim report`")
    p.add_argument(
        "--no-baseline",
        action="store_true",
        help="with --topology: skip the topology-unaware run used for comparison",
    )
    p.set_defaults(func=cmd_run)

    p = ssub.add_parser("compare", help="replay one trace under several policies")
    p.add_argument("trace")
    p.add_argument("--policies", default="fcfs,easy,conservative,easy-sjbf")
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = ssub.add_parser("report", help="plots (PNG + HTML) from a run saved with --save")
    p.add_argument("result", help="a file written by `hal sim run --save`")
    p.add_argument("--out", metavar="DIR", help="output folder (default: next to RESULT)")
    p.set_defaults(func=cmd_report)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--predictor",
        default="user",
        help="user (requested time), avg2 (Tsafrir), learned (LightGBM, online) or perfect",
    )
    p.add_argument(
        "--correction",
        default="default",
        choices=("default", "steps", "request", "model"),
        help="what an expired prediction becomes: stepwise (avg2's default), the request, "
        "or the predictor's own re-prediction (learned's default)",
    )
    p.add_argument("--procs", type=int, help="machine size (default: the header's MaxProcs)")
    p.add_argument("--cores-per-node", type=int, default=1)
    p.add_argument("--exclude-first-fraction", type=float, default=0.0, metavar="F")
    p.add_argument("--first-jobs", type=int, default=0, metavar="K")
    p.add_argument(
        "--size",
        choices=("max", "alloc", "req"),
        default="max",
        help="job size: max(fields 5, 8) (default), allocated, or requested",
    )
    p.add_argument(
        "--keep-invalid", action="store_true", help="keep jobs with run time <= 0 or no size"
    )
    p.add_argument(
        "--no-cap-run",
        action="store_true",
        help="do not cap run times at the request (they are killed there)",
    )
    p.add_argument(
        "--topology",
        default="",
        metavar="SPEC",
        help="a synthetic switch tree (leaf=16,levels=3) or blocks (block=16,levels=3); "
        "reports leaf switches or blocks per multi-node job",
    )
    p.add_argument(
        "--drop-oversize",
        action="store_true",
        help="drop jobs larger than the machine instead of capping them",
    )
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="at most N processes to replay on, split where the machine empties, as many as "
        "end it soonest on this machine's cores (default 4 with two cores or more, else "
        "1; the user and perfect predictors only); the result is the same",
    )


def _options(ns: argparse.Namespace, policy: str) -> tuple[Any, Any]:
    from hal.sim import Cleaning, SimOptions
    from hal.sim.parallel import default_workers

    cleaning = Cleaning(
        drop_invalid=not ns.keep_invalid,
        size_rule=ns.size,
        cap_size=not ns.drop_oversize,
        cap_run_at_request=not ns.no_cap_run,
        first_jobs=ns.first_jobs,
        procs=ns.procs,
    )
    options = SimOptions(
        policy=policy,
        predictor=ns.predictor,
        cores_per_node=ns.cores_per_node,
        exclude_first_fraction=ns.exclude_first_fraction,
        topology=ns.topology,
        correction=ns.correction,
        workers=default_workers() if ns.workers is None else ns.workers,
    )
    return cleaning, options


def cmd_run(ns: argparse.Namespace) -> int:
    from hal.sim import load_workload, run_workload
    from hal.sim.run import write_results
    from hal.sim.store import save_run

    try:
        _check_output("--swf-out", ns.swf_out)
        _check_output("--save", ns.save)
        cleaning, options = _options(ns, ns.policy)
        workload = load_workload(ns.trace, cleaning)
        run, summary = run_workload(workload, options)
        if options.topology and not ns.no_baseline:
            # The same trace and tree, placement ignoring the tree: what topology buys.
            from dataclasses import replace

            _, base = run_workload(workload, replace(options, topology_aware=False))
            from hal.sim.topology import SPAN_KEYS

            for key in (*SPAN_KEYS, "mean_wait_s", "mean_bsld"):
                if key in base:
                    summary["unaware_" + key] = base[key]
    except HalError as err:
        print(f"hal sim: {err}", file=sys.stderr)
        return 2
    summary["trace"] = str(ns.trace)
    try:
        if ns.swf_out:
            write_results(
                ns.swf_out,
                workload.header,
                run,
                f"HAL simulation: policy {ns.policy}, predictor {ns.predictor}",
            )
        if ns.save:
            save_run(Path(ns.save), run, summary, ns.exclude_first_fraction)
    except OSError as err:
        print(f"hal sim: cannot write {err.filename}: {err.strerror or err}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(summary, indent=2))
    else:
        width = max(map(len, summary))
        for key, value in summary.items():
            print(f"{key:>{width}}: {_fmt(value)}")
    return 0


def _check_output(option: str, value: str | None) -> None:
    """An output whose folder is missing is refused before the replay, not after it."""
    if value and not Path(value).absolute().parent.is_dir():
        raise InvalidRequest(
            f"{option} {value}: the folder {Path(value).absolute().parent} does not exist",
            field=option.lstrip("-").replace("-", "_"),
        )


def cmd_compare(ns: argparse.Namespace) -> int:
    from hal.sim import KEYS, POLICIES, load_workload, run_workload

    # each once, in the order named
    policies = list(dict.fromkeys(p.strip() for p in ns.policies.split(",") if p.strip()))
    if not policies:
        print(
            "hal sim: --policies names no policy; e.g. fcfs,easy,conservative,easy-sjbf",
            file=sys.stderr,
        )
        return 2
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:  # before any replay, not after the valid ones
        print(
            f"hal sim: unknown policy {unknown[0]!r}; choose from {', '.join(POLICIES)}",
            file=sys.stderr,
        )
        return 2
    results: dict[str, dict[str, Any]] = {}
    try:
        cleaning, _ = _options(ns, "fcfs")
        workload = load_workload(ns.trace, cleaning)
        for policy in policies:
            _, options = _options(ns, policy)
            results[policy] = run_workload(workload, options)[1]
    except HalError as err:
        print(f"hal sim: {err}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(results, indent=2))
        return 0
    cells = {key: [_fmt(results[p][key]) for p in policies] for key in KEYS}
    width = max(12, *(len(c) + 2 for c in [*policies, *(c for row in cells.values() for c in row)]))
    print(f"{'':>18}" + "".join(f"{p:>{width}}" for p in policies))
    for key, row in cells.items():
        print(f"{key:>18}" + "".join(f"{c:>{width}}" for c in row))
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from hal.sim.report import write_report
    from hal.sim.store import load_run

    path = Path(ns.result)
    try:
        run, summary, exclude = load_run(path)
    except (OSError, ValueError, KeyError) as err:
        print(
            f"hal sim: cannot read {path}: {err}; make one with `hal sim run --save FILE`",
            file=sys.stderr,
        )
        return 2
    out = Path(ns.out) if ns.out else _report_folder(path)
    try:
        html = write_report(run, summary, out, exclude)
    except OSError as err:
        print(f"hal sim: cannot write the report in {out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(html)
    return 0


def _report_folder(result: Path) -> Path:
    """Beside the result, named as it is less its suffixes (``run.npz`` → ``run/``);
    ``-report`` added where that would be the result itself."""
    out = result.with_suffix("").with_suffix("")
    return out if out != result else result.with_name(result.name + "-report")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)
