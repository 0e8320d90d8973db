"""Tiny OCI images made on the spot, for tests and benchmarks of ``--container`` that
must reach no registry: a root file system of this host's own ``/bin/sh`` and a few
programs (with the shared libraries they load), packed as an OCI image layout tarball,
as ``podman save --format oci-archive`` writes one."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from hal.host.oci import INDEX, MANIFEST, node_architecture

PROGRAMS = ("/bin/sh", "/bin/cat", "/bin/echo", "/usr/bin/id", "/bin/sleep", "/bin/ls", "/bin/date")
MARKER = "/etc/hal-test-image"


def make_rootfs(folder: Path, marker: str = "hal-test") -> Path:
    """``folder`` with this host's PROGRAMS and their libraries, ``/etc/os-release``
    saying ``ID=<marker>``, and ``MARKER`` holding ``marker``."""
    for sub in ("bin", "etc", "tmp", "usr/bin"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(folder / "tmp", 0o1777)  # noqa: S103 (a /tmp)
    for program in PROGRAMS:
        real = os.path.realpath(program)
        if not os.path.exists(real):
            continue
        _copy(real, folder / program.lstrip("/"))
        for library in _libraries(real):
            _copy(library, folder / library.lstrip("/"))
    (folder / "etc/os-release").write_text(f"ID={marker}\nNAME={marker}\n")
    (folder / MARKER.lstrip("/")).write_text(marker + "\n")
    return folder


def make_image(rootfs: Path, out: Path, architecture: str = "") -> Path:
    """An OCI image layout tarball of ``rootfs`` (one layer) at ``out``; its config says
    ``architecture`` (default: this host's)."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for path in sorted(rootfs.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(rootfs)), recursive=False)
    diff_id = "sha256:" + hashlib.sha256(layer.getvalue()).hexdigest()
    packed = gzip.compress(layer.getvalue(), mtime=0)
    config = {
        "architecture": architecture or node_architecture(),
        "os": "linux",
        "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    config_bytes = json.dumps(config).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": blob(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": blob(packed),
                "size": len(packed),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {"mediaType": MANIFEST, "digest": blob(manifest_bytes), "size": len(manifest_bytes)}
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        **{f"blobs/sha256/{d.partition(':')[2]}": data for d, data in blobs.items()},
    }
    with tarfile.open(out, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def make_bundle(folder: Path, marker: str = "hal-bundle") -> Path:
    """An OCI bundle: ``folder/rootfs`` (``make_rootfs``) and a ``config.json``."""
    make_rootfs(folder / "rootfs", marker)
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": False},
        "process": {"args": ["/bin/sh"], "env": ["PATH=/usr/bin:/bin", "BUNDLE=" + marker]},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _libraries(program: str) -> list[str]:
    try:
        listed = subprocess.run(
            ["ldd", program], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in listed.splitlines():
        for word in line.split():
            if word.startswith("/") and os.path.exists(word):
                found.append(word)
    return found


def _copy(source: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        shutil.copy2(os.path.realpath(source), target)
