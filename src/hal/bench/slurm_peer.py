"""Real Slurm as a benchmark peer for HAL.

Starts a private single-node Slurm 22.05 cluster (Debian's ``slurm-wlm``) on loopback in a
temporary directory, runs the same workloads HAL's end-to-end benchmark runs, and tears the
cluster down again.  Standard library only, so it can run before HAL is installed:

    python bench/slurm_peer.py --json                       # full run: 1000 jobs, 1000-task array
    python bench/slurm_peer.py --jobs 50 --array 50 --repeats 3

HAL's ``hal bench e2e-vs-slurm`` imports it and calls :func:`run_slurm_peer`.

Slurm is left at its defaults (sched/backfill, MinJobAge, batch_sched_delay, ...): the point is
to compare with Slurm as an administrator would get it, not a tuned or detuned one.  Must run as
root (the daemons need it, and so does the apt-get install).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("hal.bench.slurm_peer")

CPUS = 64  # the node the workloads are defined against
PARTITION = "debug"
NODE = "localhost"
DEFAULT_PORTS = (16817, 16818)
ALL_WORKLOADS = ("jobs", "array", "latency")

# Every state in which a job still holds (or waits for) the node.  COMPLETING counts as not done:
# the job has exited but Slurm is still cleaning up after it.
ACTIVE_STATES = (
    "PENDING,CONFIGURING,RUNNING,COMPLETING,SUSPENDED,STOPPED,SIGNALING,STAGE_OUT,"
    "RESIZING,REQUEUED,REQUEUE_FED,REQUEUE_HOLD,SPECIAL_EXIT"
)
# Polling squeue costs CPU on a 2-core machine that Slurm also needs, so bulk workloads poll less
# often than the single-job latency probe, whose resolution matters more.
BULK_POLL_S = 0.2
LATENCY_POLL_S = 0.1

_apt_updated = False


class SlurmPeerError(RuntimeError):
    """Setting up or driving the Slurm peer failed; the message says why."""


def bench_work_dir() -> Path:
    """A directory for benchmark state outside /tmp (see ``SlurmCluster.start``)."""
    work = Path.home() / ".cache" / "hal-bench"
    work.mkdir(parents=True, exist_ok=True)
    return work


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path.name})"


def _run(
    argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


# --------------------------------------------------------------------------------------------
# Installation


def ensure_installed(notes: list[str]) -> None:
    """Install Debian's slurm-wlm and munge if the daemons are missing."""
    global _apt_updated
    needed = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "scancel")
    if all(shutil.which(b) for b in needed):
        return
    if os.geteuid() != 0:
        raise SlurmPeerError("Slurm is not installed and installing it needs root")
    if shutil.which("apt-get") is None:
        raise SlurmPeerError("Slurm is not installed and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    steps: list[list[str]] = []
    if not _apt_updated:
        steps.append(["apt-get", "update", "-q"])
    steps.append(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurm-wlm", "munge"]
    )
    for argv in steps:
        log.info("running %s", " ".join(argv))
        try:
            proc = _run(argv, env=env, timeout=900)
        except subprocess.TimeoutExpired as exc:
            raise SlurmPeerError(f"{' '.join(argv)} timed out") from exc
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
            raise SlurmPeerError(
                f"{' '.join(argv)} failed (exit {proc.returncode}):\n" + "\n".join(out)
            )
        if argv[1] == "update":
            _apt_updated = True
    missing = [b for b in needed if shutil.which(b) is None]
    if missing:
        raise SlurmPeerError(f"installed slurm-wlm but still missing: {', '.join(missing)}")
    notes.append("installed slurm-wlm and munge with apt-get")


def slurm_version(env: dict[str, str] | None = None) -> str:
    out = _run(["sbatch", "--version"], env=env).stdout.split()  # "slurm-wlm 22.05.8"
    return out[-1] if out else "unknown"


# --------------------------------------------------------------------------------------------
# The private cluster


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pick_ports() -> tuple[int, int]:
    if all(_port_free(p) for p in DEFAULT_PORTS):
        return DEFAULT_PORTS
    # Another cluster (or a leftover) holds the usual ports: take two the kernel hands out.
    ports: list[int] = []
    while len(ports) < 2:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in ports:
            ports.append(port)
    return ports[0], ports[1]


def _real_memory_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return max(1, int(line.split()[1]) // 1024 - 512)
    except (OSError, ValueError):
        pass
    return 1024


class SlurmCluster:
    """munged + slurmctld + slurmd, all private to one temporary directory.

    Use as a context manager; :meth:`stop` is idempotent and also registered with atexit, so
    the daemons go away on errors, Ctrl-C and normal interpreter exit.
    """

    def __init__(self, cpus: int = CPUS, max_array_size: int = 1001, keep_dir: bool = False):
        self.cpus = cpus
        self.max_array_size = max_array_size
        self.keep_dir = keep_dir
        self.root = Path()
        self.conf = Path()
        self.env: dict[str, str] = {}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.ctld_port, self.slurmd_port = 0, 0
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, ready_timeout_s: float = 60.0) -> None:
        self._started = True
        atexit.register(self.stop)
        self.root = Path(tempfile.mkdtemp(prefix="hal-slurm-peer-"))
        # munged refuses a socket whose directories are not executable by everyone.
        self.root.chmod(0o755)
        for sub in ("munge", "state", "spool", "log", "work"):
            (self.root / sub).mkdir()
        # State and spool (a file or two per job) outside /tmp, where file creation on this
        # VM is ~10x slower than elsewhere on the same disk; HAL's benchmark does the same.
        self.disk = Path(tempfile.mkdtemp(prefix="hal-slurm-peer-", dir=bench_work_dir()))
        self.ctld_port, self.slurmd_port = _pick_ports()
        self.conf = self.root / "slurm.conf"
        # Clients and daemons find the cluster only through SLURM_CONF; SLURM_*/SBATCH_* left
        # over from a surrounding job would change what sbatch does, so drop them.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_"))}
        self.env["SLURM_CONF"] = str(self.conf)

        self._start_munged()
        self.conf.write_text(self.render_conf())
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        # -N pins the node name, so the real hostname does not matter.
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
        self._wait_idle(ready_timeout_s)

    def render_conf(self) -> str:
        r = self.root
        sock = r / "munge" / "munge.sock"
        lines = [
            "ClusterName=halpeer",
            f"SlurmctldHost={NODE}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            # Bind to the resolved address (127.0.0.1) rather than INADDR_ANY: loopback only.
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={sock}",
            "CredType=cred/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "MailProg=/bin/true",  # only silences a startup error; no mail is sent
            f"MaxArraySize={self.max_array_size}",
            f"StateSaveLocation={self.disk}/state",
            f"SlurmdSpoolDir={self.disk}/spool",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            # The machine has 2 cores; the workloads are defined for a 64-CPU node, so slurmd
            # must report the configured CPUs instead of the hardware it finds.
            "SlurmdParameters=config_overrides",
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={_real_memory_mb()} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        return "\n".join(lines) + "\n"

    disk: Path = Path()

    def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        atexit.unregister(self.stop)
        if self.procs and self.conf.exists():
            # Cancel whatever is left so no slurmstepd outlives its slurmd.
            with contextlib.suppress(Exception):
                _run(["scancel", "-p", PARTITION], env=self.env, timeout=10)
        # slurmd first (it reports to slurmctld), then slurmctld, then munged.
        for name, proc in reversed(self.procs):
            _terminate(name, proc)
        self.procs.clear()
        if self.root != Path():
            _sweep(f"SLURM_CONF={self.conf}".encode())
            if self.keep_dir:
                log.info("kept %s", self.root)
            else:
                shutil.rmtree(self.root, ignore_errors=True)
                shutil.rmtree(self.disk, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = (self.root / "log" / f"{name}.out").open("wb")
        try:
            # Own session: a Ctrl-C in the terminal reaches us, and we stop the daemons in order.
            proc = subprocess.Popen(
                argv,
                env=self.env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()
        self.procs.append((name, proc))
        return proc

    def _start_munged(self) -> None:
        m = self.root / "munge"
        key = m / "munge.key"
        # Same as `dd if=/dev/urandom bs=1 count=1024`; munged wants it private to its owner.
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        sock = m / "munge.sock"
        proc = self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        deadline = time.monotonic() + 15
        while not sock.exists():
            if proc.poll() is not None:
                raise SlurmPeerError(
                    f"munged exited with {proc.returncode}:\n{_tail(m / 'munged.log')}"
                )
            if time.monotonic() > deadline:
                raise SlurmPeerError(f"munged socket never appeared:\n{_tail(m / 'munged.log')}")
            time.sleep(0.05)

    def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise SlurmPeerError(
                        f"{name} exited with {proc.returncode} during startup:\n"
                        + _tail(self.root / "log" / f"{name}.out")
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                res = _run(["sinfo", "-h", "-n", NODE, "-o", "%T"], env=self.env, timeout=10)
                state = res.stdout.strip()
                if state == "idle":
                    return
            time.sleep(0.2)
        raise SlurmPeerError(
            f"node not idle after {timeout_s:g}s (state {state!r}):\n"
            + _tail(self.root / "log" / "slurmctld.log")
        )

    # -- client commands ---------------------------------------------------------------------

    def sbatch(self, *args: str) -> tuple[str, float]:
        """Submit one batch job; returns (job id, seconds the sbatch command took)."""
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", *args]
        t0 = time.perf_counter()
        res = _run(argv, env=self.env, timeout=120)
        took = time.perf_counter() - t0
        if res.returncode != 0:
            raise SlurmPeerError(f"sbatch failed ({res.returncode}): {res.stderr.strip()}")
        # --parsable prints "jobid" or "jobid;cluster".
        return res.stdout.strip().split(";")[0], took

    def active(self, *selector: str) -> int:
        """Number of squeue lines for the selector that are not finished yet."""
        res = _run(
            ["squeue", "-h", "-t", ACTIVE_STATES, "-o", "%i", *selector], env=self.env, timeout=60
        )
        if res.returncode != 0:
            raise SlurmPeerError(f"squeue failed ({res.returncode}): {res.stderr.strip()}")
        return len(res.stdout.split())

    def final_states(self, *selector: str) -> dict[str, int]:
        """Count of finished records by state (kept for MinJobAge=300 s after the end)."""
        res = _run(["squeue", "-h", "-r", "-t", "all", "-o", "%T", *selector], env=self.env)
        counts: dict[str, int] = {}
        for st in res.stdout.split():
            counts[st] = counts.get(st, 0) + 1
        return counts


def _terminate(name: str, proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s ignored SIGTERM; killing it", name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    # Anything else left in the daemon's process group (slurmstepd, job processes).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _sweep(marker: bytes) -> None:
    """Kill stray processes of this cluster: slurmstepd and jobs inherit SLURM_CONF=<ours>."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker + b"\0" in environ + b"\0":
            log.warning("killing leftover process %s", entry.name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


# --------------------------------------------------------------------------------------------
# Workloads


class _Poller:
    """Polls until a selector has no active jobs, and keeps track of what polling costs."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.calls = 0
        self.seconds = 0.0

    def wait_done(self, selector: Sequence[str], interval: float, deadline: float) -> bool:
        while True:
            t0 = time.perf_counter()
            n = self.cluster.active(*selector)
            self.calls += 1
            self.seconds += time.perf_counter() - t0
            if n == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)


def _drain(cluster: SlurmCluster, poller: _Poller, name: str) -> None:
    """After a timeout: cancel the workload's jobs so the next workload starts clean."""
    _run(["scancel", "-n", name], env=cluster.env, timeout=30)
    poller.wait_done(["-n", name], BULK_POLL_S, time.monotonic() + 60)


def _check_states(
    cluster: SlurmCluster, name: str, expected: int, result: dict[str, Any], key: str
) -> None:
    states = cluster.final_states("-n", name)
    result[f"{key}_states"] = states
    if states.get("COMPLETED", 0) != expected:
        result["notes"].append(f"{key}: expected {expected} COMPLETED records, saw {states}")


def _workload_jobs(
    cluster: SlurmCluster, poller: _Poller, n: int, timeout_s: float, result: dict[str, Any]
) -> None:
    name = "hal-peer-jobs"
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    took: list[float] = []
    for _ in range(n):
        took.append(cluster.sbatch("-J", name, "--wrap", "true")[1])
        if time.monotonic() >= deadline:
            break
    submitted = time.perf_counter() - t0
    ok = len(took) == n and poller.wait_done(["-n", name], BULK_POLL_S, deadline)
    elapsed = time.perf_counter() - t0
    result["jobs_1000_submit_s"] = round(submitted, 3)
    result["jobs_1000_sbatch_p50_s"] = round(statistics.median(took), 4)
    if not ok:
        result["jobs_1000_s"] = None
        result["jobs_1000_rate"] = None
        result["errors"].append(
            f"jobs: {len(took)}/{n} submitted, not all complete after {timeout_s:g}s"
        )
        _drain(cluster, poller, name)
        return
    result["jobs_1000_s"] = round(elapsed, 3)
    result["jobs_1000_rate"] = round(n / elapsed, 2)
    _check_states(cluster, name, n, result, "jobs_1000")


def _workload_array(
    cluster: SlurmCluster, poller: _Poller, n: int, timeout_s: float, result: dict[str, Any]
) -> None:
    name = "hal-peer-array"
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout_s
    _, took = cluster.sbatch("-J", name, f"--array=0-{n - 1}", "--wrap", "true")
    ok = poller.wait_done(["-n", name], BULK_POLL_S, deadline)
    elapsed = time.perf_counter() - t0
    result["array_1000_sbatch_s"] = round(took, 4)
    if not ok:
        result["array_1000_s"] = None
        result["errors"].append(f"array: not all {n} tasks complete after {timeout_s:g}s")
        _drain(cluster, poller, name)
        return
    result["array_1000_s"] = round(elapsed, 3)
    result["array_1000_rate"] = round(n / elapsed, 2)
    _check_states(cluster, name, n, result, "array_1000")


def _workload_latency(
    cluster: SlurmCluster, poller: _Poller, repeats: int, timeout_s: float, result: dict[str, Any]
) -> None:
    latencies: list[float] = []
    sbatch_s: list[float] = []
    for i in range(repeats):
        name = f"hal-peer-lat-{i}"
        t0 = time.perf_counter()
        job_id, took = cluster.sbatch("-J", name, "--wrap", "true")
        if not poller.wait_done(["-j", job_id], LATENCY_POLL_S, time.monotonic() + timeout_s):
            result["errors"].append(f"latency: job {job_id} not complete after {timeout_s:g}s")
            _drain(cluster, poller, name)
            continue
        latencies.append(time.perf_counter() - t0)
        sbatch_s.append(took)
    result["single_job_latency_s"] = [round(x, 3) for x in latencies]
    result["single_job_latency_p50_s"] = (
        round(statistics.median(latencies), 3) if latencies else None
    )
    result["sbatch_p50_s"] = round(statistics.median(sbatch_s), 4) if sbatch_s else None


def run_slurm_peer(
    workloads: list[str] | None = None,
    jobs: int = 1000,
    array: int = 1000,
    latency_repeats: int = 5,
    timeout_s: float = 300,
    *,
    keep_dir: bool = False,
) -> dict[str, object]:
    """Run the workloads against a fresh private Slurm cluster and return the measurements.

    ``workloads`` is any of "jobs", "array", "latency" (default: all, in that order).  Each
    workload is bounded by ``timeout_s``; one that runs out is reported in ``errors`` with its
    value set to None.  Setup failures (no Slurm, daemons that do not start) come back as
    ``ok: False`` with ``error`` set rather than as an exception.  ``keep_dir`` keeps the
    cluster's temporary directory (config and daemon logs) for debugging.
    """
    chosen = list(ALL_WORKLOADS) if workloads is None else list(workloads)
    unknown = sorted(set(chosen) - set(ALL_WORKLOADS))
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; choose from {list(ALL_WORKLOADS)}")
    notes: list[str] = []
    errors: list[str] = []
    result: dict[str, Any] = {
        "system": "slurm",
        "version": None,
        "jobs_1000_s": None,
        "jobs_1000_rate": None,
        "array_1000_s": None,
        "single_job_latency_p50_s": None,
        "sbatch_p50_s": None,
        "cpus": CPUS,
        "jobs": jobs,
        "array": array,
        "latency_repeats": latency_repeats,
        "workloads": chosen,
        "notes": notes,
        "errors": errors,
    }
    try:
        ensure_installed(notes)
        t_setup = time.perf_counter()
        with SlurmCluster(max_array_size=max(1001, array + 1), keep_dir=keep_dir) as cluster:
            result["setup_s"] = round(time.perf_counter() - t_setup, 2)
            result["version"] = slurm_version(cluster.env)
            poller = _Poller(cluster)
            runners: dict[str, Callable[[], None]] = {
                "jobs": lambda: _workload_jobs(cluster, poller, jobs, timeout_s, result),
                "array": lambda: _workload_array(cluster, poller, array, timeout_s, result),
                "latency": lambda: _workload_latency(
                    cluster, poller, latency_repeats, timeout_s, result
                ),
            }
            for w in chosen:
                log.info("slurm peer: running workload %s", w)
                try:
                    runners[w]()
                except (SlurmPeerError, subprocess.TimeoutExpired) as exc:
                    errors.append(f"{w}: {exc}")
            if poller.calls:
                result["squeue_polls"] = poller.calls
                result["squeue_poll_mean_s"] = round(poller.seconds / poller.calls, 4)
    except SlurmPeerError as exc:
        result["error"] = str(exc)
    notes.append(
        f"completion = job gone from squeue's active states (incl. COMPLETING), polled every "
        f"{BULK_POLL_S}s (bulk) / {LATENCY_POLL_S}s (latency); squeue's own cost is in "
        "squeue_poll_mean_s"
    )
    notes.append(
        "Slurm defaults: sched/backfill, batch_sched_delay=3s, MinJobAge=300s; one node, "
        f"{CPUS} CPUs via SlurmdParameters=config_overrides on a "
        f"{os.cpu_count()}-core machine; jobs run as root"
    )
    notes.append(
        "Slurm starts batch jobs in scheduling passes about every 3 s (batch_sched_delay), "
        f"at most one job per free CPU per pass, so bulk throughput is about {CPUS}/3 jobs/s "
        "and one job waits up to 3 s; the trivial jobs themselves run in ~20 ms"
    )
    result["ok"] = "error" not in result and not errors
    return result


# --------------------------------------------------------------------------------------------
# CLI


def _summary(r: dict[str, object]) -> Iterator[str]:
    def fmt(key: str, unit: str = "s") -> str:
        v = r.get(key)
        return "n/a" if v is None else f"{v} {unit}".rstrip()

    yield f"Slurm {r.get('version')} peer ({r.get('cpus')} CPUs, single node on loopback)"
    if "error" in r:
        yield f"  FAILED: {r['error']}"
    rate = fmt("jobs_1000_rate", "jobs/s")
    yield f"  {r['jobs']} x sbatch --wrap true:     {fmt('jobs_1000_s')}  ({rate})"
    yield f"  array 0-{int(str(r['array'])) - 1}:                 {fmt('array_1000_s')}"
    yield f"  single job submit->done p50: {fmt('single_job_latency_p50_s')}"
    yield f"  sbatch p50:                  {fmt('sbatch_p50_s')}"
    for e in r.get("errors") or []:  # type: ignore[attr-defined]
        yield f"  error: {e}"
    for n in r.get("notes") or []:  # type: ignore[attr-defined]
        yield f"  note: {n}"


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds through the cluster's finally/__exit__


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--jobs", type=int, default=1000, help="independent jobs (default 1000)")
    p.add_argument("--array", type=int, default=1000, help="array tasks (default 1000)")
    p.add_argument("--repeats", type=int, default=5, help="single-job latency repeats")
    p.add_argument("--timeout", type=float, default=300, help="seconds per workload")
    p.add_argument(
        "--workloads", default=",".join(ALL_WORKLOADS), help="comma list of jobs,array,latency"
    )
    p.add_argument("--keep", action="store_true", help="keep the cluster's temp dir and logs")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = run_slurm_peer(
            workloads=[w for w in args.workloads.split(",") if w],
            jobs=args.jobs,
            array=args.array,
            latency_repeats=args.repeats,
            timeout_s=args.timeout,
            keep_dir=args.keep,
        )
    except KeyboardInterrupt:
        print("interrupted; the Slurm peer was shut down", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(_summary(result)))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
