"""A conda-pack archive made on the spot, for tests of ``--python-env=NAME@VERSION``
without conda: an environment prefix whose Python is this host's (a venv made with
``--copies``: ``bin/python`` is a file, and ``sys.prefix`` is wherever the prefix lies),
packed as conda-pack 0.9 packs one (``conda pack -o env.tar.gz``):

- the prefix's files at the archive's top, ``conda-meta/`` among them;
- files of conda packages that record the build placeholder prefix (a text file, and a
  binary one whose recorded path is padded with NULs), listed in the records of
- ``bin/conda-unpack``: conda-pack's script (its prefix-rewriting code, without the
  Windows branches), ``#!/usr/bin/env python``, which imports
  ``conda_unpack_progress`` from beside it and rewrites each record's placeholder to the
  folder it was unpacked in (the parent of its ``bin``), text files in place and binary
  ones padded to their length;
- a console script in ``bin`` whose ``#!`` line conda-pack rewrote to ``/usr/bin/env
  python``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

# conda-build's, in packages' files: 255 characters, so a binary file's path has room
# for the prefix it is unpacked at
PLACEHOLDER = (
    "/home/conda/feedstock_root/build_artifacts/halconda_1700000000000/_h_env" + "_placehold" * 25
)[:255]
MODULE = "halconda"
BINARY = "lib/libhalconda.dat"

UNPACK = """#!/usr/bin/env python
# Import progress bar to display unpack progress
from conda_unpack_progress import progressbar

import re
import sys

on_win = sys.platform == 'win32'


def update_prefix(path, new_prefix, placeholder, mode='text'):
    with open(path, 'rb+') as fh:
        original_data = fh.read()
        fh.seek(0)
        data = replace_prefix(original_data, mode, placeholder, new_prefix)
        if data != original_data:
            fh.write(data)
            fh.truncate()


def replace_prefix(data, mode, placeholder, new_prefix):
    if mode == 'text':
        return data.replace(placeholder.encode('utf-8'), new_prefix.encode('utf-8'))
    if mode == 'binary':
        data2 = binary_replace(data, placeholder.encode('utf-8'), new_prefix.encode('utf-8'))
        if len(data2) != len(data):
            raise ValueError("Found mismatched data length in binary file")
        return data2
    raise ValueError("Invalid mode: %r" % mode)


def binary_replace(data, placeholder, new_prefix):
    def replace(match):
        occurances = match.group().count(placeholder)
        padding = (len(placeholder) - len(new_prefix)) * occurances
        if padding < 0:
            raise ValueError("negative padding")
        return match.group().replace(placeholder, new_prefix) + b'\\0' * padding

    pat = re.compile(re.escape(placeholder) + b'([^\\0]*?)\\0')
    return pat.sub(replace, data)


_prefix_records = [
{records}
]

if __name__ == '__main__':
    import os
    import argparse
    parser = argparse.ArgumentParser(
            prog='conda-unpack',
            description=('Finish unpacking the environment after unarchiving. '
                         'Cleans up absolute prefixes in any remaining files'))
    parser.add_argument('--version', action='store_true', help='Show version then exit')
    parser.add_argument('--verbose', '-v', action='store_true',
                        help='Show progress bar during unpacking')
    args = parser.parse_args()
    if args.version:
        print('conda-unpack 0.9.2')
    else:
        script_dir = os.path.dirname(__file__)
        new_prefix = os.path.abspath(os.path.dirname(script_dir))
        with progressbar(_prefix_records, enabled=args.verbose) as records:
            for path, placeholder, mode in records:
                update_prefix(os.path.join(new_prefix, path), new_prefix, placeholder, mode=mode)
"""
PROGRESS = """import contextlib


@contextlib.contextmanager
def progressbar(iterable, enabled=False):
    yield iterable
"""
HELLO = f"""#!/usr/bin/env python
import sys
import {MODULE}
print("hello from", sys.prefix, {MODULE}.PREFIX)
"""


def make_conda_pack(folder: Path, out: Path, top: str = "") -> Path:
    """A conda-pack archive at ``out`` (tar.gz), its environment built in ``folder``
    (removed once packed: the archive must stand alone); ``top``: the archive's one top
    folder (``conda pack --arcroot``), "" for conda-pack's default."""
    prefix = folder / "envs" / "halenv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--copies", "--without-pip", str(prefix)], check=True
    )
    for script in prefix.glob("bin/[Aa]ctivate*"):
        script.unlink()  # (venv's, which name the build prefix: conda-pack writes its own)
    site = next(prefix.glob("lib/python*/site-packages"))
    (site / f"{MODULE}.py").write_text(f"PREFIX = {PLACEHOLDER + '/share/halconda'!r}\n")
    (prefix / BINARY).write_bytes(
        b"\x7fHAL\0" + (PLACEHOLDER + "/lib").encode() + b"\0" * 200 + b"end\0"
    )
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta/history").write_text("==> 2026-01-01 00:00:00 <==\n")
    (prefix / "conda-meta/halconda-1.0-0.json").write_text('{"name": "halconda"}\n')
    records = [
        (str(site.relative_to(prefix) / f"{MODULE}.py"), PLACEHOLDER, "text"),
        (BINARY, PLACEHOLDER, "binary"),
    ]
    listed = ",\n".join(repr(r) for r in records)
    _executable(prefix / "bin/conda-unpack", UNPACK.replace("{records}", listed))
    (prefix / "bin/conda_unpack_progress.py").write_text(PROGRESS)
    _executable(prefix / "bin/halhello", HELLO)
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(prefix.rglob("*")):
            name = str(path.relative_to(prefix))
            tar.add(path, arcname=f"{top}/{name}" if top else name, recursive=False)
    shutil.rmtree(folder / "envs")
    return out


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)
