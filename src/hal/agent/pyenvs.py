"""The node's Python environments (``--python-env``; docs/user/environments.md).

A job that names a lock (hal.core.pyenv) runs with a virtual environment built from it,
once per node per lock content: ``STATE_DIR/artifacts/SHA256.venv/venv``, beside the
artifacts' copies, under the same size bound and holds (``ArtifactCache``): the least
recently used go first, never one a job on the node holds.

- **Build**: with uv when the agent finds it (on its ``PATH``, or installed beside HAL's
  Python), else ``python -m venv`` and pip; the interpreter is the agent's own. The
  package index is the one the node is configured for: uv's own settings (``UV_*``) when
  there are any, else pip's (``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``,
  ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``, then ``pip.conf``), passed to uv as flags.
- **Once**: jobs of this agent share one build (a future per digest); agents sharing the
  folder take turns on a lock file. The environment is built in place (a venv cannot
  move), then made read-only, and ``ready`` is written last: a half-built one is removed
  and built again.
- **conda-pack**: a conda environment published as an archive (``kind`` conda) is
  fetched through the artifact cache (its file kept as it is), then unpacked and
  relocated once per node per digest (``hal.agent.conda``) in ``SHA256.conda/env``, with
  the same lock, ``ready`` mark, holds and failure memory.
- **Failure**: the resolver's message fails the job (its error file, and the launch's
  reason). The failure is remembered (``.failed/SHA256``) for ``FAILED_FOR_S``: jobs with
  the same lock fail at once with it instead of building again; a corrected lock is
  another digest, built at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hal.agent import conda
from hal.agent.artifacts import READY, ArtifactCache, read_only, remove_tree
from hal.agent.plan import filename_fields, resolve_user
from hal.core.artifacts import PROGRAM
from hal.core.pyenv import CONDA, UV
from hal.slurm.filenames import output_paths
from hal.slurm.job_variables import DEFAULT_PATH
from hal.wire.agent import Launch, PythonEnvPin

log = logging.getLogger("hal.agent")

FAILED = ".failed"
FAILED_FOR_S = 600.0  # a failed build is not tried again for this long (the same lock)
BUILD_TIMEOUT_S = 3600.0
MESSAGE_CHARS = 4000  # of the resolver's output kept in the failure
SUFFIX = ".venv"
_UV_SETTINGS = (
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_NO_INDEX",
)


class PythonEnvError(Exception):
    """The environment could not be built; the job fails with this message."""


class PythonEnvs:
    def __init__(
        self,
        cache: ArtifactCache,
        python: str = sys.executable,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.root = cache.root
        self.python = python
        self.clock = clock
        self._building: dict[str, asyncio.Future[Path]] = {}
        self.builds = 0  # environments built here (metrics, tests)
        self.failures = 0  # builds that failed
        self.last_build_s = 0.0

    async def activate(
        self, job_id: int, pin: PythonEnvPin, environment: dict[str, str]
    ) -> dict[str, str]:
        """``environment`` with the job's Python environment active, built first if new."""
        archive: Path | None = None
        try:
            self.cache.hold(job_id, [pin.sha256 + suffix(pin)])  # (eviction spares it now)
            ready = (self.root / (pin.sha256 + suffix(pin)) / READY).exists()
            if pin.kind == CONDA and not ready:  # (its archive is needed to unpack it)
                archive = await self._archive(job_id, pin)
            place = await self._ensure(pin, archive)
        except OSError as err:  # this node's disk, not the lock
            raise PythonEnvError(f"cannot keep an environment on this node: {err}") from err
        if pin.kind == CONDA:
            return conda.activated(place / "env", pin.sha256, environment)
        return activated(place / "venv", pin.sha256, environment)

    async def _archive(self, job_id: int, pin: PythonEnvPin) -> Path:
        """A conda-pack archive's file here (fetched once, held for the job); it is kept
        as it is (a program's copy), unpacked in the environment's own folder."""
        if pin.artifact is None:
            raise PythonEnvError("the job's conda environment names no artifact")
        kept = pin.artifact.model_copy(update={"kind": PROGRAM})
        return await self.cache.copy(job_id, kept) / "file"

    async def _ensure(self, pin: PythonEnvPin, archive: Path | None = None) -> Path:
        place = self.root / (pin.sha256 + suffix(pin))
        if (place / READY).exists():
            with contextlib.suppress(OSError):
                os.utime(place / READY)  # recently used: evicted last
            return place
        running = self._building.get(pin.sha256)
        if running is None:
            self._check_failed(pin.sha256)
            running = asyncio.ensure_future(self._build(pin, place, archive))
            self._building[pin.sha256] = running
            running.add_done_callback(lambda _: self._building.pop(pin.sha256, None))
        return await asyncio.shield(running)

    def _check_failed(self, sha256: str) -> None:
        mark = self.root / FAILED / sha256
        with contextlib.suppress(OSError):
            age = self.clock() - mark.stat().st_mtime
            if age < FAILED_FOR_S:
                raise PythonEnvError(
                    f"{mark.read_text()}\n(this lock's build failed {age:.0f} s ago on this "
                    f"node and is not tried again for {FAILED_FOR_S:.0f} s: fix the lock and "
                    "submit again; a changed lock is a new environment)"
                )

    async def _build(self, pin: PythonEnvPin, place: Path, archive: Path | None) -> Path:
        started = time.monotonic()
        try:
            built = await asyncio.to_thread(self._build_locked, pin, place, archive)
        except PythonEnvError as err:
            self.failures += 1
            (self.root / FAILED).mkdir(parents=True, exist_ok=True)
            (self.root / FAILED / pin.sha256).write_text(str(err))
            raise
        if built:
            self.builds += 1
            self.last_build_s = time.monotonic() - started
            log.info("python environment %s built in %.1f s", pin.sha256[:12], self.last_build_s)
            await asyncio.to_thread(self.cache.evict, set(self.cache.live_jobs()))
        return place

    def _build_locked(self, pin: PythonEnvPin, place: Path, archive: Path | None) -> bool:
        """Build under the folder's lock; False when another agent built it meanwhile."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{pin.sha256}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (place / READY).exists():
                return False
            if place.exists():
                remove_tree(place)  # one left half-built
            place.mkdir(mode=0o755)
            try:
                if pin.kind == CONDA:
                    unpack_conda(pin, place, archive)
                else:
                    build(pin, place, self.python)
            except BaseException:
                remove_tree(place)
                raise
            return True


def suffix(pin: PythonEnvPin) -> str:
    """The folder's suffix beside the artifacts' copies: a lock's venv or a conda prefix."""
    return conda.SUFFIX if pin.kind == CONDA else SUFFIX


def unpack_conda(pin: PythonEnvPin, place: Path, archive: Path | None) -> None:
    """The conda-pack ``archive`` of ``pin`` unpacked and relocated in ``place/env``."""
    a = pin.artifact
    name = f"{a.name}@{a.version}" if a is not None else pin.sha256[:12]
    if archive is None:  # (it was ready when the job started, and removed since)
        raise PythonEnvError(f"{name}: the environment went while it was wanted: run it again")
    try:
        conda.unpack(archive, place / "env", name)
    except conda.CondaError as err:
        raise PythonEnvError(str(err)) from err
    _mark_ready(place)


def build(pin: PythonEnvPin, place: Path, python: str) -> None:
    """The environment of ``pin`` in ``place/venv`` (its lock files in ``place/lock``)."""
    lock = place / "lock"
    lock.mkdir()
    for name, text in pin.files.items():
        (lock / name).write_text(text)
    venv = place / "venv"
    requirements = str(lock / "requirements.txt")
    uv = find_uv()
    if pin.kind == UV:
        if uv is None:
            raise PythonEnvError(
                "a uv.lock needs uv on the node, which has none: install uv there, or "
                "submit a requirements file (uv export --format requirements-txt)"
            )
        sync = ["sync", "--frozen", "--no-install-project", "--compile-bytecode"]
        where = ["--python", python, "--project", str(lock)]
        _run([uv, *sync, *where, *uv_index_flags(python)], {"UV_PROJECT_ENVIRONMENT": str(venv)})
    elif uv is not None:
        _run([uv, "venv", "--quiet", "--python", python, str(venv)], {})
        install = ["pip", "install", "--compile-bytecode", "--python", str(venv / "bin/python")]
        _run([uv, *install, "-r", requirements, *uv_index_flags(python)], {})
    else:
        _run([python, "-m", "venv", str(venv)], {})
        pip = [str(venv / "bin/python"), "-m", "pip", "install", "--no-input"]
        _run([*pip, "--disable-pip-version-check", "-r", requirements], {})
    _mark_ready(place)


def _mark_ready(place: Path) -> None:
    """``ready`` (with the bytes it takes) last, and no write bits left."""
    size = sum(f.lstat().st_size for f in place.rglob("*") if f.is_file())
    (place / READY).write_text(str(size))
    read_only(place)


def _run(argv: list[str], extra: dict[str, str]) -> None:
    env = {**os.environ, **extra}
    env.pop("VIRTUAL_ENV", None)  # the agent's own: never the one being built
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise PythonEnvError(
            f"building the Python environment took over {BUILD_TIMEOUT_S:.0f} s: {argv[0]}"
        ) from err
    except OSError as err:
        raise PythonEnvError(f"cannot run {argv[0]}: {err.strerror}") from err
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-MESSAGE_CHARS:]
        tool = Path(argv[0]).name
        raise PythonEnvError(
            f"the Python environment could not be built ({tool} exited {done.returncode}):\n{said}"
        )


def find_uv() -> str | None:
    """uv on the agent's PATH, else the one installed beside HAL's Python."""
    found = shutil.which("uv")
    if found:
        return found
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if os.access(beside, os.X_OK) else None


def uv_index_flags(python: str) -> list[str]:
    """pip's index settings as uv flags, unless uv has settings of its own (uv reads
    neither ``PIP_*`` nor ``pip.conf``)."""
    if any(os.environ.get(v) for v in _UV_SETTINGS):
        return []
    pip = pip_settings(python)
    flags: list[str] = []
    if pip.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    if pip.get("index-url"):
        flags += ["--default-index", pip["index-url"]]
    extra = pip.get("extra-index-url", "").split()
    for url in extra:
        flags += ["--index", url]
    if extra:  # pip takes the best match from every index; uv, by default, the first's
        flags += ["--index-strategy", "unsafe-best-match"]
    for place in pip.get("find-links", "").split():
        flags += ["--find-links", place]
    return flags


def pip_settings(python: str) -> dict[str, str]:
    """pip's own view: ``PIP_*`` variables over ``pip config list`` (pip.conf files)."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listed = subprocess.run(
            [python, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
        for line in listed.splitlines():
            key, _, value = line.partition("=")
            section, _, name = key.partition(".")
            if section in ("global", "install") and name:
                out[name] = value.strip().strip("'\"")
    for name in ("index-url", "extra-index-url", "find-links", "no-index"):
        given = os.environ.get("PIP_" + name.upper().replace("-", "_"))
        if given is not None:
            out[name] = given
    return out


def activated(venv: Path, sha256: str, environment: dict[str, str]) -> dict[str, str]:
    """``environment`` with ``venv`` active, as its ``bin/activate`` would make it."""
    env = dict(environment)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["HAL_PYTHON_ENV"] = sha256
    # another environment of ours (srun's environment came from the batch node, or the
    # submitter's own venv) gives way
    old = environment.get("VIRTUAL_ENV")
    path = [
        p
        for p in env.get("PATH", DEFAULT_PATH).split(":")
        if not p.endswith(SUFFIX + "/venv/bin") and not (old and p == f"{old}/bin")
    ]
    env["PATH"] = ":".join([str(venv / "bin"), *path])
    return env


def write_job_error(launch: Launch, node: str, message: str, unknown_users_as_agent: bool) -> None:
    """``message`` into the job's error file (its output file without ``-e``), as the
    job's user, so its owner finds why it never ran where its output would be."""
    try:
        run_as = resolve_user(launch, unknown_users_as_agent=unknown_users_as_agent)
        fields = filename_fields(launch, node)
        stdout, stderr = output_paths(
            launch.stdout,
            launch.stderr,
            launch.workdir,
            fields,
            array=launch.array_job_id is not None,
        )
        path = stderr if stderr is not None else stdout
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_APPEND
        fd = os.open(path, flags, 0o644)
        try:
            if run_as.uid is not None and os.geteuid() == 0:
                os.fchown(fd, run_as.uid, run_as.gid if run_as.gid is not None else -1)
            os.write(fd, f"hal: {message}\n".encode())
        finally:
            os.close(fd)
    except Exception as err:  # the job fails all the same; its reason says why
        log.warning("job %d: cannot write its error file: %s", launch.job_id, err)
