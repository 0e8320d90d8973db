"""``squeue``'s whole path against a live ``hal server`` holding a full queue: the request,
the server's list, the parse and the layout, at each queue size, for this tree and
(``--before``) another, server and client each run from their tree, back to back in
one run so that a loaded machine's figures compare.

For each size a SQLite database is filled with that many pending jobs (a partition that
is down, so that no pass starts them; 20 users, 8 names, 2 partitions a job in a tenth),
then for each tree: ``hal server`` on it in its own process, and ``--samples`` times in a
client process of that tree: ``squeue`` (its default format, in process: wall and CPU
seconds), ``squeue -o "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R %Q %V"`` once, the REST
list of every field (``GET /v1/jobs``: wall, bytes) and, in this tree, the list of
squeue's fields. The server's CPU per ``squeue`` is read from its process. The first
``squeue`` after the server's start (it builds every job's JSON) is reported apart.
Then ``hal squeue`` as a user runs it, a process of its own (its default format and the
``-o`` above, ``--samples`` times each): wall, the process's CPU, the server's CPU, and
the output's SHA-256 (the same in both trees: the same lines). Prints one JSON object::

    python bench/squeue_path.py [--jobs 20000 100000] [--samples 7] [--before ../main/src]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SRC = HERE.parent.parent / "src"
SHOWN = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R %Q %V"


def _fill(db: str, count: int) -> str:
    """``count`` pending jobs in ``db`` and an administrator's token."""
    from hal.server.users import ensure_user
    from hal.state.store import SqlStateStore
    from hal.testing import make_job

    store = SqlStateStore(db)
    try:
        token = ensure_user(store, "admin", admin=True, now=time.time())
        for start in range(1, count + 1, 5000):
            jobs = []
            for i in range(start, min(count, start + 4999) + 1):
                made = make_job(i).user(f"user{i % 20}").name(f"job{i % 8}")
                made = made.partitions("bulk", "other") if i % 10 == 0 else made.partition("bulk")
                jobs.append(made.build())
            with store.transaction() as tx:
                tx.insert_scripts([(j.id, j.spec.script) for j in jobs])
                tx.insert_jobs(jobs, [j.id for j in jobs])
    finally:
        store.close()
    assert token is not None
    return token


def _config(path: Path) -> None:
    path.write_text(
        "[[partitions]]\n"
        'name = "bulk"\n'
        "default = true\n"
        "up = false\n"
        'nodes = "emu[1-1000]"\n'
        "[[partitions]]\n"
        'name = "other"\n'
        "up = false\n"
        'nodes = "emu[1-1000]"\n'
    )


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3)}


def client(url: str, token: str, samples: int, server_pid: int, other: str) -> dict[str, Any]:
    """In a client process of the tree measured: the figures of one server (``other``:
    the src/ of another tree whose ``hal squeue`` must print the same, or "")."""
    import httpx
    import psutil

    from hal.client import HalClient
    from hal.client.config import ClientConfig
    from hal.compat.commands import run

    server = psutil.Process(server_pid)
    # the commands' client as they make it, with room for a loaded machine's 100,000 jobs
    config = ClientConfig(url=url, token=token, timeout_seconds=900.0)
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=900)

    def squeue(*argv: str) -> tuple[float, float, float, int]:
        out = io.StringIO()
        served = sum(server.cpu_times()[:2])
        wall, cpu = time.perf_counter(), time.process_time()
        rc = run("squeue", list(argv), stdout=out, client_factory=lambda: HalClient(config=config))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if rc != 0:
            raise RuntimeError(f"squeue {' '.join(argv)}: exit {rc}")
        return wall, cpu, sum(server.cpu_times()[:2]) - served, out.getvalue().count("\n")

    first = squeue()  # (the server's first list after its start builds every job's JSON)
    walls, cpus, served = [], [], []
    for _ in range(samples):
        wall, cpu, server_cpu, lines = squeue()
        walls.append(wall)
        cpus.append(cpu)
        served.append(server_cpu)
    shown = [squeue("-o", SHOWN)[0] for _ in range(2)]  # (its first: the format's JSON)

    def listing(params: dict[str, str]) -> tuple[float, dict[str, float], int]:
        """The first list (cold where nothing asked for these fields yet), then more."""
        times, size = [], 0
        for _ in range(1 + max(1, samples // 2)):
            t = time.perf_counter()
            got = http.get("/v1/jobs", params=params)
            times.append(time.perf_counter() - t)
            size = len(got.content)
        return round(times[0], 3), _percentiles(times[1:]), size

    def command(*argv: str, src: str | None = None) -> tuple[float, float, float, str]:
        """``hal squeue ARGV`` in a process of its own (of the tree at ``src``, default
        this one): wall, its CPU, the server's, and the SHA-256 of what it printed."""
        env = {**os.environ, "HAL_URL": url, "HAL_TOKEN": token}
        if src is not None:
            env["PYTHONPATH"] = src
        served = sum(server.cpu_times()[:2])
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "hal.cli.main", "squeue", *argv],
            env=env,
            capture_output=True,
            check=True,
            timeout=900,
        )
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
        digest = hashlib.sha256(done.stdout).hexdigest()
        return wall, cpu, sum(server.cpu_times()[:2]) - served, digest

    def as_run(*argv: str) -> dict[str, Any]:
        runs = [command(*argv) for _ in range(samples)]
        out: dict[str, Any] = {
            "s": _percentiles([r[0] for r in runs]),
            "cpu_s": _percentiles([r[1] for r in runs]),
            "server_cpu_s": _percentiles([r[2] for r in runs]),
            "sha256": sorted({r[3] for r in runs}),
        }
        if other:  # the other tree's command against this server, right after
            out["same_as_other_tree"] = command(*argv, src=other)[3] == runs[-1][3]
        return out

    commands = {"hal_squeue": as_run(), "hal_squeue_10_columns": as_run("-o", SHOWN)}
    cold, warm, size = listing({})
    out: dict[str, Any] = {
        "lines": lines,
        "squeue_first_s": round(first[0], 3),
        "squeue_s": _percentiles(walls),
        "squeue_client_cpu_s": _percentiles(cpus),
        "squeue_server_cpu_s": _percentiles(served),
        "squeue_10_columns_first_s": round(shown[0], 3),
        "squeue_10_columns_s": round(shown[1], 3),
        "rest_list_first_s": cold,
        "rest_list_s": warm,
        "rest_list_bytes": size,
        **commands,
    }
    try:
        from hal.compat.squeue import parse_query, query_fields
    except ImportError:
        return out  # (a tree before fields=)
    query = parse_query([])
    assert query is not None
    _, warm, size = listing({"fields": ",".join(query_fields(query) or ())})
    out["rest_list_squeue_fields_s"] = warm
    out["rest_list_squeue_fields_bytes"] = size
    return out


def _measure(
    src: Path, db: str, work: Path, token: str, samples: int, other: Path | None
) -> dict[str, Any]:
    """``hal server`` of the tree at ``src`` on ``db``, and its client's figures (with
    whether the tree at ``other``, if any, prints the same)."""
    sys.path.insert(0, str(SRC))
    from hal.testing.live import stop_process

    env = {**os.environ, "PYTHONPATH": str(src)}
    config = work / "hal.toml"
    _config(config)
    server, url = _server(src, db, config, work)
    try:
        measured = subprocess.run(
            [
                *(sys.executable, str(HERE), "--client", url, token, str(samples)),
                *(str(server.pid), "--other", str(other or "")),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )
        if measured.returncode != 0:
            raise RuntimeError(measured.stderr[-3000:])
        figures: dict[str, Any] = json.loads(measured.stdout)
        return figures
    finally:
        stop_process(server)


def _server(src: Path, db: str, config: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``hal server`` of the tree at ``src`` on ``db`` with ``config``, in a process of its
    own (its CPU counted apart), once it answers; and its URL."""
    import httpx

    from hal.testing import http
    from hal.testing.live import free_port, wait_until

    port = free_port()
    log = work / f"server-{port}.log"
    args = ["server", "--db", db, "--data-dir", str(work / f"data-{port}"), "--port", str(port)]
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "hal.cli.main", *args, "--config", str(config)],
            env={**os.environ, "PYTHONPATH": str(src)},
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        if server.poll() is not None:
            raise RuntimeError(log.read_text()[-3000:])
        try:
            return http.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout=900, interval=0.5, message="the server to answer")
    except BaseException:
        server.kill()
        raise
    return server, url


def _cpu() -> str:
    """The CPU's model name and count, as lscpu says them."""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another tree's src/, measured first")
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--other", default="", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.client:
        url, token, samples, pid = ns.client
        print(json.dumps(client(url, token, int(samples), int(pid), ns.other)))
        return
    sys.path.insert(0, str(SRC))
    trees = ([("before", ns.before.resolve())] if ns.before else []) + [("now", SRC)]
    result: dict[str, Any] = {"cpu": _cpu(), "samples": ns.samples}
    result["load_before"] = os.getloadavg()
    for count in ns.jobs:
        with tempfile.TemporaryDirectory(prefix="hal-squeue-") as tmp:
            work = Path(tmp)
            db = f"sqlite:///{work / 'hal.db'}"
            t = time.perf_counter()
            token = _fill(db, count)
            row: dict[str, Any] = {"fill_s": round(time.perf_counter() - t, 1)}
            for name, src in trees:
                other = next((o for n, o in trees if n != name), None)
                row[name] = _measure(src, db, work, token, ns.samples, other)
                print(f"{count} jobs, {name}: {json.dumps(row[name])}", file=sys.stderr)
            result[str(count)] = row
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
