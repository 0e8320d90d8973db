"""Artifacts: pinned versions of software that jobs run (``--artifact NAME@VERSION``).

An artifact is one file, published under a name and a version (``hal artifact push``):
a tar or zip archive that agents unpack, or a single program. A version is immutable;
its content is named by its SHA-256. A job's spec pins each artifact it asked for to
that digest at submission, so what it runs is what was published when it was submitted,
whatever is published later (docs/user/artifacts.md, ADR 0020).

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hal.core.errors import InvalidRequest

MAX_ARTIFACTS = 16  # per job
# names and versions: what a file name and an environment variable's suffix can hold
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
LATEST = "latest"  # a version no one may publish: "the newest one, pinned at submission"
# what a version's file is: an archive the nodes unpack (tar, compressed or not, or zip),
# a program they keep as it is, or an OCI image (a layout tarball) jobs run in with
# ``--container`` (hal.core.container)
ARCHIVE, PROGRAM, IMAGE = "archive", "program", "image"
KINDS = (ARCHIVE, PROGRAM, IMAGE)
IMAGE_SUFFIXES = (".oci.tar", ".oci")
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")
# the first bytes of each: gzip, bzip2, xz, zip (a local file header), tar ("ustar" at 257)
HEAD = 512  # the first bytes, which tell an archive and its kind (``kind_of_content``)
_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"PK\x03\x04")


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """One artifact of a job, pinned: ``sha256`` names its content."""

    name: str
    version: str
    sha256: str
    kind: str = PROGRAM  # ARCHIVE (unpacked on the node) or PROGRAM
    # the alias the job named (``NAME@stable``), resolved to ``version`` at submission;
    # "" when it named the version (or none)
    alias: str = ""

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def variable(self) -> str:
        return variable_of(self.name)


@dataclass(frozen=True, slots=True)
class Artifact:
    """A published version, as the registry lists it."""

    name: str
    version: str
    sha256: str
    size: int
    owner: str  # who published it
    created: float
    kind: str = PROGRAM

    def ref(self, alias: str = "") -> ArtifactRef:
        return ArtifactRef(self.name, self.version, self.sha256, self.kind, alias)


def kind_of_name(file_name: str) -> str:
    """What ``hal artifact push`` calls a file: an archive by its suffix, else a program
    (a Python zipapp ``.pyz`` or a self-extracting installer is a program); an image by
    ``.oci.tar`` (``podman save --format oci-archive``)."""
    if file_name.lower().endswith(IMAGE_SUFFIXES):
        return IMAGE
    return ARCHIVE if file_name.lower().endswith(ARCHIVE_SUFFIXES) else PROGRAM


def kind_of_content(head: bytes) -> str:
    """The server's guess where a client did not say (REST without ``kind``), from the
    first 512 bytes: a compressed file, a zip or a tar is an archive."""
    if head.startswith(_MAGIC) or head[257:262] == b"ustar":
        return ARCHIVE
    return PROGRAM


def suffix_of(head: bytes) -> str:
    """The file-name suffix an archive's first bytes say it has ("" for none known): a
    pulled archive is named so that tar and unzip take it."""
    for magic, suffix in zip(_MAGIC, (".tar.gz", ".tar.bz2", ".tar.xz", ".zip"), strict=True):
        if head.startswith(magic):
            return suffix
    return ".tar" if head[257:262] == b"ustar" else ""


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise InvalidRequest(
            f"artifact kind {kind!r} is not known: use archive (unpacked on the nodes), "
            "program (kept as it is) or image (an OCI image tarball, for --container)",
            field="kind",
        )
    return kind


def variable_of(name: str) -> str:
    """The job's variable holding an artifact's path: ``HAL_ARTIFACT_<NAME>`` (upper
    case, every character but letters and digits as ``_``)."""
    return "HAL_ARTIFACT_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def check_name(name: str, what: str = "artifact name") -> str:
    if not NAME.fullmatch(name):
        raise InvalidRequest(
            f"{what} {name!r} is not valid: use letters, digits and . _ + - "
            "(at most 128, starting with a letter or a digit)",
            field="name" if what == "artifact name" else "version",
        )
    return name


def check_version(version: str) -> str:
    check_name(version, "artifact version")
    if version.lower() == LATEST:
        raise InvalidRequest(
            f"{LATEST!r} is not a version one may publish: it means the newest version, "
            "pinned at submission; give a version such as 1.0",
            field="version",
        )
    return version


def parse_request(text: str) -> tuple[str, str]:
    """``NAME`` or ``NAME@VERSION`` → (name, version); ``latest`` when none is given."""
    name, at, version = text.strip().partition("@")
    if at and not version:
        raise InvalidRequest(
            f"artifact {text!r}: no version after '@'; write NAME@VERSION, or NAME alone "
            "for the newest version",
            field="artifacts",
        )
    check_name(name)
    if version:
        check_name(version, "artifact version")
    return name, version or LATEST


def parse_requests(texts: list[str]) -> list[tuple[str, str]]:
    """A job's ``--artifact`` values (each may list several, comma-separated)."""
    out: list[tuple[str, str]] = []
    for text in texts:
        if not text.strip():
            raise InvalidRequest(
                "--artifact needs NAME[@VERSION] (hal artifact list shows them)",
                field="artifacts",
            )
        out.extend(parse_request(part) for part in text.split(",") if part.strip())
    if len(out) > MAX_ARTIFACTS:
        raise InvalidRequest(
            f"a job may name at most {MAX_ARTIFACTS} artifacts, not {len(out)}; "
            "pack the rest into one archive",
            field="artifacts",
        )
    seen: dict[str, str] = {}
    for name, _ in out:
        other = seen.setdefault(variable_of(name), name)
        if other != name or [n for n, _ in out].count(name) > 1:
            raise InvalidRequest(
                f"artifacts {other!r} and {name!r} would share ${variable_of(name)}"
                if other != name
                else f"artifact {name!r} is named twice; a job runs one version of each",
                field="artifacts",
            )
    return out
