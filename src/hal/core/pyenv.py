"""A job's Python environment (``--python-env``; docs/user/environments.md): the lock file
it names, pinned by content at submission. Pure: no I/O but ``read_lock``'s, on the
submitting host.

Three forms:

- ``requirements``: one requirements file whose every requirement is pinned
  (``name==version``, or a direct URL), hashes welcome; it is stored as
  ``requirements.txt``;
- ``uv``: a project's ``pyproject.toml`` and the ``uv.lock`` beside it;
- ``conda``: a conda environment packed with conda-pack and published as an artifact
  (``--python-env=NAME@VERSION``; over REST ``{"artifact": "NAME@VERSION"}``), pinned
  to its content at submission like ``--artifact``'s; the nodes unpack and relocate it.

The lock files travel with the job (as its batch script does) and reach each node byte
for byte; ``sha256`` over their names and contents names the environment on every node,
so jobs with the same lock share one build there. A conda environment's ``sha256`` is
its archive's.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from hal.core.artifacts import ARCHIVE, ArtifactRef, parse_request
from hal.core.errors import InvalidRequest

REQUIREMENTS = "requirements"
UV = "uv"
CONDA = "conda"
ARTIFACT_KEY = "artifact"  # REST: python_env {"artifact": "NAME@VERSION"}
REQUIREMENTS_FILE = "requirements.txt"
PROJECT_FILES = ("pyproject.toml", "uv.lock")
MAX_LOCK_BYTES = 4 * 1024 * 1024  # all files together
_PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*===?\s*[^\s;,]+")


@dataclass(frozen=True, slots=True)
class PythonEnv:
    kind: str  # REQUIREMENTS, UV or CONDA
    sha256: str  # "" for a conda environment until it is pinned
    files: tuple[tuple[str, str], ...]  # (file name, content), by name; () for conda
    artifact: ArtifactRef | None = None  # CONDA: the conda-pack archive published

    def __str__(self) -> str:
        return f"{self.kind}:{self.sha256[:12]}"

    @property
    def shown(self) -> str:
        """As ``scontrol show job`` and the REST job show it: the lock's kind and sha256,
        or ``conda:NAME@VERSION`` (its digest is among the job's artifact digests)."""
        if self.artifact is not None:
            return f"{CONDA}:{self.artifact}"
        return f"{self.kind}:{self.sha256}"


def digest_of(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        data = files[name].encode()
        h.update(b"%s\0%d\0" % (name.encode(), len(data)))
        h.update(data)
    return h.hexdigest()


def make_python_env(files: dict[str, str]) -> PythonEnv:
    """Check a submission's lock files; the pin. Refuses what no node could build exactly.
    ``{"artifact": "NAME@VERSION"}``: a conda-pack archive, pinned later (``pin_conda``)."""
    if set(files) == {ARTIFACT_KEY}:
        return conda_env(files[ARTIFACT_KEY])
    if set(files) == {REQUIREMENTS_FILE}:
        kind = REQUIREMENTS
        check_requirements(files[REQUIREMENTS_FILE])
    elif set(files) == set(PROJECT_FILES):
        kind = UV
        if "[[package]]" not in files["uv.lock"]:
            raise InvalidRequest(
                "uv.lock lists no packages: run `uv lock` in the project and submit again",
                field="python_env",
            )
    else:
        raise InvalidRequest(
            f"python_env holds {sorted(files)}: give {{'{REQUIREMENTS_FILE}': TEXT}}, "
            "{'pyproject.toml': TEXT, 'uv.lock': TEXT} or {'artifact': 'NAME@VERSION'} "
            "(a conda-pack archive published with hal artifact push)",
            field="python_env",
        )
    size = sum(len(v.encode()) for v in files.values())
    if size > MAX_LOCK_BYTES:
        raise InvalidRequest(
            f"the lock files take {size:,} bytes, over {MAX_LOCK_BYTES:,}: a lock file "
            "that large is no lock file; publish the environment as an artifact instead",
            field="python_env",
        )
    return PythonEnv(kind, digest_of(files), tuple(sorted(files.items())))


def is_artifact_name(value: str, cwd: str = "") -> bool:
    """Whether ``--python-env``'s value names a published conda environment
    (``NAME@VERSION``) rather than a lock file: it has an ``@`` and no ``/``, and no file
    or folder of that name is in ``cwd`` (a lock file wins)."""
    text = value.strip()
    return "@" in text and "/" not in text and not os.path.exists(os.path.join(cwd, text))


def conda_env(text: str) -> PythonEnv:
    """``NAME@VERSION`` (or ``NAME@ALIAS``): a conda environment published as an archive,
    to be pinned to its content."""
    if "@" not in text:
        raise InvalidRequest(
            f"--python-env={text!r}: name the conda environment's artifact with its version "
            "(NAME@VERSION, NAME@ALIAS or NAME@latest), or give a lock file",
            field="python_env",
        )
    name, version = parse_request(text)
    return PythonEnv(CONDA, "", (), ArtifactRef(name, version, "", ARCHIVE))


def pin_conda(env: PythonEnv, pinned: ArtifactRef) -> PythonEnv:
    """The conda environment pinned to ``pinned`` (its registry entry); refused unless
    that is an archive (conda-pack writes a tar.gz)."""
    if pinned.kind != ARCHIVE:
        raise InvalidRequest(
            f"--python-env={pinned}: that artifact is a{'n' if pinned.kind[0] in 'aeiou' else ''} "
            f"{pinned.kind}, not a conda-pack archive: pack the environment (conda pack -n ENV "
            f"-o env.tar.gz) and publish it (hal artifact push {pinned.name}@VERSION env.tar.gz)",
            field="python_env",
        )
    return PythonEnv(CONDA, pinned.sha256, (), pinned)


def check_requirements(text: str) -> None:
    """Every requirement pinned to one version (or a direct URL/path): the environment is
    the same on every node and on every day."""
    pinned = 0
    for number, raw in enumerate(_logical_lines(text), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            if line.startswith(("-r", "-c", "--requirement", "--constraint", "-e", "--editable")):
                raise InvalidRequest(
                    f"requirements line {number} ({line[:60]!r}) refers to another file or "
                    "an editable checkout, which the nodes do not have: submit one complete "
                    "lock (`uv pip compile` or `pip freeze` writes one)",
                    field="python_env",
                )
            continue  # --hash, --index-url, --find-links ...: options pip and uv read
        if ("@" in line.split(";", 1)[0] and "://" in line) or line.startswith(("./", "/")):
            pinned += 1  # a direct URL or path: what it names is what is installed
            continue
        if not _PINNED.match(line):
            raise InvalidRequest(
                f"requirements line {number} ({line[:60]!r}) is not pinned to one version: "
                "pin every package (name==version), e.g. with `uv pip compile "
                "requirements.in -o requirements.txt` or `pip freeze`",
                field="python_env",
            )
        pinned += 1
    if not pinned:
        raise InvalidRequest(
            "the requirements file lists no package: name at least one (name==version)",
            field="python_env",
        )


def _logical_lines(text: str) -> list[str]:
    """Lines with pip's backslash continuations joined."""
    out: list[str] = []
    current = ""
    for line in text.splitlines():
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        out.append(current + line)
        current = ""
    if current:
        out.append(current)
    return out


def read_lock(path: str, cwd: str = "") -> dict[str, str]:
    """The files ``--python-env=PATH`` names, read on the submitting host: a requirements
    file, or a ``pyproject.toml``/``uv.lock`` (either, or their folder) with the other
    beside it; ``NAME@VERSION`` (``is_artifact_name``): ``{"artifact": NAME@VERSION}``.
    A relative path is read in ``cwd``, and said as it was given."""
    if is_artifact_name(path, cwd):
        return {ARTIFACT_KEY: path.strip()}
    is_dir = os.path.isdir(os.path.join(cwd, path))  # (an absolute path stays as it is)
    folder = path if is_dir else os.path.dirname(path) or "."
    name = os.path.basename(path)
    if is_dir or name in PROJECT_FILES:
        files = {}
        for wanted in PROJECT_FILES:
            full = os.path.join(folder, wanted)
            if not os.path.isfile(os.path.join(cwd, full)):
                raise InvalidRequest(
                    f"--python-env: {full} not found: a uv project needs pyproject.toml and "
                    "uv.lock side by side (run `uv lock`), or give a requirements file",
                    field="python_env",
                )
            files[wanted] = _read(full, cwd)
        return files
    return {REQUIREMENTS_FILE: _read(path, cwd)}


def _read(path: str, cwd: str) -> str:
    try:
        with open(os.path.join(cwd, path), encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as err:
        raise InvalidRequest(f"--python-env: {path} is not UTF-8 text ({err.reason})") from err
    except OSError as err:
        raise InvalidRequest(f"--python-env: cannot read {path}: {err.strerror}") from err
