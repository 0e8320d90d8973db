"""Tiny pure-Python wheels made on the spot, for tests and benchmarks of ``--python-env``
that must not depend on what a package index holds: a folder of them is a ``--find-links``
source for uv and pip."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str, body: str = "", requires: str = "") -> Path:
    """``folder/NAME-VERSION-py3-none-any.whl``: module ``NAME`` whose ``VERSION`` is
    ``version`` (plus ``body``), depending on ``requires`` (``Requires-Dist`` lines)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires.split(",") if r)
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n{body}",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hal-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel
