"""Conda environments packed with conda-pack (``--python-env=NAME@VERSION``;
docs/user/environments.md), made ready on a node.

conda-pack writes the environment's prefix as a tar archive (``conda pack -n ENV -o
env.tar.gz``): the prefix's files at the archive's top (or in one top folder,
``--arcroot``), and a ``bin/conda-unpack`` script that rewrites the prefix the
environment was built at, wherever it is recorded in its files (scripts' ``#!`` lines,
text and binary files), to the folder it was unpacked in. So a node:

1. unpacks the archive (``unpack``) into ``STATE_DIR/artifacts/SHA256.conda/env``, with
   Python's ``data`` filter (nothing outside the folder, no device files, no link out);
2. runs ``bin/conda-unpack`` there, with the environment's ``bin`` first in ``PATH`` (its
   ``#!/usr/bin/env python`` is the environment's own Python, as conda-pack's
   instructions say: activate, then conda-unpack);
3. marks it ready and read-only (``hal.agent.pyenvs`` does, with the lock and holds it
   uses for lock-built environments).

``activated`` is what conda-pack's ``bin/activate`` does to a shell's variables:
``CONDA_PREFIX`` and ``PATH``.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

from hal.slurm.job_variables import DEFAULT_PATH

SUFFIX = ".conda"
UNPACK = "bin/conda-unpack"
UNPACK_TIMEOUT_S = 1800.0
MESSAGE_CHARS = 4000
MAKE_ONE = (
    "pack the environment with conda-pack (conda pack -n ENV -o env.tar.gz, without "
    "--dest-prefix) and publish that archive (hal artifact push NAME@VERSION env.tar.gz)"
)


class CondaError(Exception):
    """The archive is no conda-pack archive, or it cannot be made ready here."""


def unpack(archive: Path, prefix: Path, name: str) -> None:
    """The conda-pack ``archive`` (``name``: what the job called it) unpacked and
    relocated at ``prefix``, which must not exist yet."""
    staging = prefix.with_name(prefix.name + ".unpacking")
    if not hasattr(tarfile, "data_filter"):  # (Python 3.11.4 and later have it)
        raise CondaError("this node's Python cannot unpack archives safely: run HAL on 3.11.4+")
    try:
        if not tarfile.is_tarfile(archive):
            raise CondaError(f"{name} is not a tar archive, so no conda-pack archive: {MAKE_ONE}")
        with tarfile.open(archive) as tar:
            top = _top(tar.getnames(), name)
            tar.extractall(staging, filter="data")
    except (OSError, tarfile.TarError, EOFError) as err:
        raise CondaError(f"cannot unpack {name}: {err.__class__.__name__}: {err}") from err
    os.rename(staging / top if top else staging, prefix)
    if top:
        staging.rmdir()
    relocate(prefix, name)


def _top(names: list[str], name: str) -> str:
    """The folder of the archive that holds the prefix: "" (conda-pack's default), or
    its one top folder (``conda pack --arcroot``)."""
    clean = {n.removeprefix("./").rstrip("/") for n in names}
    if UNPACK in clean:
        return ""
    tops = {n.split("/", 1)[0] for n in clean if n}
    if len(tops) == 1:
        top = tops.pop()
        if f"{top}/{UNPACK}" in clean:
            return top
    raise CondaError(f"{name} is not a conda-pack archive (it has no {UNPACK}): {MAKE_ONE}")


def relocate(prefix: Path, name: str) -> None:
    """Run the environment's ``conda-unpack``: its recorded prefix becomes ``prefix``."""
    bin_dir = prefix / "bin"
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH') or DEFAULT_PATH}",
        "CONDA_PREFIX": str(prefix),
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
    }
    try:
        done = subprocess.run(
            [str(prefix / UNPACK)],
            cwd=prefix,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=UNPACK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise CondaError(f"{name}: conda-unpack ran over {UNPACK_TIMEOUT_S:.0f} s") from err
    except OSError as err:
        raise CondaError(f"{name}: cannot run {UNPACK}: {err.strerror}") from err
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-MESSAGE_CHARS:]
        raise CondaError(f"{name}: conda-unpack exited {done.returncode}:\n{said}")


def activated(prefix: Path, sha256: str, environment: dict[str, str]) -> dict[str, str]:
    """``environment`` with the conda environment at ``prefix`` active, as conda-pack's
    ``bin/activate`` makes a shell's: ``CONDA_PREFIX``, its ``bin`` first in ``PATH``;
    another environment of ours, or a venv or conda prefix the submitter had, gives way."""
    env = dict(environment)
    env.pop("PYTHONHOME", None)
    old = [v for v in (env.pop("VIRTUAL_ENV", None), env.get("CONDA_PREFIX")) if v]
    env["CONDA_PREFIX"] = str(prefix)
    env["CONDA_DEFAULT_ENV"] = str(prefix)
    env["HAL_PYTHON_ENV"] = sha256
    path = [
        p
        for p in env.get("PATH", DEFAULT_PATH).split(":")
        if not p.endswith((".venv/venv/bin", SUFFIX + "/env/bin"))
        and not any(p == f"{o}/bin" for o in old)
    ]
    env["PATH"] = ":".join([str(prefix / "bin"), *path])
    return env
