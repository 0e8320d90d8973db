"""The node's copies of artifacts (docs/user/artifacts.md, ADR 0020).

Before a job's batch script or a step of it starts on this node, ``ArtifactCache.deploy``
makes sure each artifact the job pinned is here: fetched once per node by its SHA-256
(``GET /v1/agent/artifacts/SHA256``, or at the node's leaf cache where the server's
route names one: ``hal.agent.artifact_tree``), checked against it, and installed
read-only under ``STATE_DIR/artifacts/SHA256`` (``SHA256.program`` for a program):

- an archive (tar, compressed or not, or zip) is unpacked into ``tree/``; when all its
  entries sit in one top folder (other than ``bin``), that folder is the artifact's root;
- a program is ``file`` (executable), with ``by-name/NAME/NAME`` linking to it.

The job then finds each artifact's root (or file) in ``HAL_ARTIFACT_<NAME>``, and its
``bin`` folder (a program's ``by-name/NAME``) first in ``PATH``. Jobs that run at once
share one download; a copy is kept until the cache is over its size and no job on the
node holds it (least recently deployed first).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hal.agent.artifact_tree import TreeChannel, TreeCounts, TreeUnusable, read_through
from hal.core.artifacts import ARCHIVE, variable_of
from hal.slurm.job_variables import DEFAULT_PATH
from hal.wire.agent import ArtifactPin, CachedCopy, CacheReport

if TYPE_CHECKING:
    import tarfile
    import zipfile

log = logging.getLogger("hal.agent")

READY = "ready"  # written last: the copy is whole
HOLDS = ".holds"  # which jobs hold which copies
PRUNE_EVERY = 64  # deploys between two looks at the holds (a fetch looks too)
TRIES = 3  # fetches of one artifact before the job's launch fails
RETRY_SECONDS = 1.0  # then 2, 4 ...


class ArtifactError(Exception):
    """An artifact could not be deployed; the job's launch fails with this message."""


class ArtifactMissing(ArtifactError):
    """The server has no such content (removed since the job was submitted)."""


@runtime_checkable
class ArtifactChannel(Protocol):
    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        """``GET /v1/agent/artifacts/{sha256}``: hand the content to ``write`` piece by
        piece. Raises ``ArtifactMissing`` where the server has none, ``ArtifactError``
        (or the channel's own errors) where it cannot be read now."""
        ...


class ArtifactCache:
    def __init__(
        self,
        root: Path,
        channel: ArtifactChannel | None,
        limit_bytes: int,
        live_jobs: Callable[[], Iterable[int]],
        node: str = "",
    ) -> None:
        self.root = root
        self.channel = channel
        self.node = node  # asked for its route through the cache tree ("": never)
        self.tree = TreeCounts()
        self.limit_bytes = limit_bytes
        self.live_jobs = live_jobs  # the jobs with processes (or records) on this node
        self._fetching: dict[str, asyncio.Future[Path]] = {}
        # job → the digests it deployed, one file per job (``HOLDS``/JOB): a restarted
        # agent adopts running jobs, and their copies stay held
        self.holds = root / HOLDS
        self.fetches = 0  # downloads made (metrics, tests)
        self.fetched_bytes = 0
        self._deploys = 0
        # told the name of each copy eviction removes (container images: hal.agent.containers)
        self.on_remove: list[Callable[[str], None]] = []
        # counts what may have changed the copies or their holds (the agent reports the
        # cache to the server when it moved: ``inventory``)
        self.changes = 0

    async def deploy(
        self, job_id: int, pins: Iterable[ArtifactPin], environment: dict[str, str]
    ) -> dict[str, str]:
        """``environment`` with the job's artifacts in it, each one here first."""
        pins = list(pins)
        try:
            self.hold(job_id, [copy_name(p) for p in pins])
            places = await asyncio.gather(*(self._ensure(p) for p in pins))
            self._deploys += 1
            if self._deploys % PRUNE_EVERY == 0:  # ended jobs' holds go, even with no fetch
                await asyncio.to_thread(self.evict, set(self.live_jobs()))
            return _environment(pins, places, environment)
        except OSError as err:  # this node's disk, not the artifact
            raise ArtifactError(f"cannot keep a copy on this node: {err}") from err

    async def copy(self, job_id: int, pin: ArtifactPin) -> Path:
        """The folder of ``pin``'s copy here (fetched first if new), held for the job."""
        try:
            self.hold(job_id, [copy_name(pin)])
            return await self._ensure(pin)
        except OSError as err:
            raise ArtifactError(f"cannot keep a copy on this node: {err}") from err

    def hold(self, job_id: int, copies: list[str]) -> None:
        self.changes += 1
        self.holds.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # the jobs' users reach their copies, not the list of them
        with open(self.holds / str(job_id), "a") as f:
            f.write("".join(f"{name}\n" for name in copies))

    async def _ensure(self, pin: ArtifactPin) -> Path:
        name = copy_name(pin)
        place = self.root / name
        if (place / READY).exists():
            with contextlib.suppress(OSError):
                os.utime(place / READY)  # recently deployed: evicted last
            return place
        running = self._fetching.get(name)
        if running is None:
            running = asyncio.ensure_future(self._fetch(pin.sha256, place, pin.kind))
            self._fetching[name] = running
            running.add_done_callback(lambda _: self._fetching.pop(name, None))
        return await asyncio.shield(running)

    async def _fetch(self, sha256: str, place: Path, kind: str) -> Path:
        if self.channel is None:
            raise ArtifactError("this agent's channel to the server cannot fetch artifacts")
        part = self.root / f".{sha256}.{secrets.token_hex(4)}.part"
        try:
            for attempt in range(TRIES):
                try:
                    size = await self._download(sha256, part)
                    break
                except ArtifactMissing:
                    raise
                except Exception as err:
                    if attempt == TRIES - 1:
                        raise ArtifactError(f"cannot fetch it from the server: {err}") from err
                    log.warning("artifact %s: fetch failed (%s); retrying", sha256[:12], err)
                    await asyncio.sleep(RETRY_SECONDS * 2**attempt)
            place = await asyncio.to_thread(_install, part, place, kind)
        finally:
            with contextlib.suppress(OSError):
                part.unlink()
        self.fetches += 1
        self.fetched_bytes += size
        await asyncio.to_thread(self.evict, set(self.live_jobs()))
        return place

    async def _download(self, sha256: str, part: Path) -> int:
        """The content into ``part``: at the leaf cache where the server's route names
        one, else (or when that fails) from the server. Checked against ``sha256``."""
        channel = self.channel
        assert channel is not None
        route = None
        if self.node and isinstance(channel, TreeChannel):
            try:
                route = await channel.artifact_route(sha256, self.node)
            except Exception as err:  # an older server, or none now: the direct fetch says
                log.info("artifact %s: no route through the cache tree (%s)", sha256[:12], err)
        if route is not None and route.cache:
            try:
                size = await _receive(part, sha256, lambda w: read_through(route, w, self.tree))
            except (TreeUnusable, ArtifactError, OSError) as err:
                self.tree.fallbacks += 1
                log.warning(
                    "artifact %s: not through leaf cache %s (%s); fetching it from the server",
                    sha256[:12],
                    route.leaf,
                    err,
                )
            else:
                self.tree.fetches += 1
                self.tree.bytes += size
                return size
        return await _receive(part, sha256, lambda w: channel.artifact(sha256, w))

    def evict(self, live: set[int]) -> None:
        """Remove the least recently deployed copies no ``live`` job holds, while the
        cache is over its limit; forget the holds of jobs no longer live."""
        self.changes += 1
        held = self._held(live, forget=True)
        copies = self._copies()
        total = sum(size for _, _, size in copies)
        for _, place, size in sorted(copies):
            if total <= self.limit_bytes:
                break
            if place.name in held:
                continue
            remove_tree(place)
            total -= size
            log.info("artifact copy %s removed: the cache is over its limit", place.name[:12])
            for removed in self.on_remove:
                removed(place.name)

    def inventory(self, live: set[int]) -> CacheReport:
        """The copies here, their sizes, when last used and whether a ``live`` job holds
        them (``hal artifact nodes``)."""
        held = self._held(live, forget=False)
        copies = [
            CachedCopy(name=place.name, size=size, used=used, held=place.name in held)
            for used, place, size in sorted(self._copies(), key=lambda c: c[1].name)
        ]
        return CacheReport(limit_bytes=self.limit_bytes, copies=copies)

    def _held(self, live: set[int], *, forget: bool) -> set[str]:
        """The copies ``live`` jobs hold (``forget``: the holds of the others go)."""
        held: set[str] = set()
        if not self.holds.is_dir():
            return held
        for hold in self.holds.iterdir():
            with contextlib.suppress(OSError, ValueError):
                if int(hold.name) in live:
                    held.update(hold.read_text().split())
                elif forget:
                    hold.unlink()
        return held

    def _copies(self) -> list[tuple[float, Path, int]]:
        """(last used, folder, bytes) of each whole copy."""
        copies: list[tuple[float, Path, int]] = []
        if not self.root.is_dir():
            return copies
        for place in self.root.iterdir():
            with contextlib.suppress(OSError, ValueError):
                ready = (place / READY).stat()
                copies.append((ready.st_mtime, place, int((place / READY).read_text() or 0)))
        return copies


async def _receive(
    part: Path, sha256: str, source: Callable[[Callable[[bytes], object]], Awaitable[None]]
) -> int:
    """What ``source`` hands over, written to ``part`` (anew) and checked against
    ``sha256``; its size."""
    digest, size = hashlib.sha256(), 0
    with await asyncio.to_thread(open, part, "wb") as f:

        def write(data: bytes) -> None:
            nonlocal size
            digest.update(data)
            size += len(data)
            f.write(data)

        await source(write)
    if digest.hexdigest() != sha256:
        raise ArtifactError(f"the content received has sha256 {digest.hexdigest()}")
    return size


def copy_name(pin: ArtifactPin) -> str:
    """The folder of a copy: its digest, and ``.program`` for content kept as a program
    (the same bytes may be published as an archive too)."""
    return pin.sha256 if pin.kind == ARCHIVE else f"{pin.sha256}.program"


def _environment(
    pins: list[ArtifactPin], places: list[Path], environment: dict[str, str]
) -> dict[str, str]:
    env = dict(environment)
    bins: list[str] = []
    for pin, place in zip(pins, places, strict=True):
        root, folder = _root_of(place, pin.name)
        env[variable_of(pin.name)] = str(root)
        if folder is not None:
            bins.append(str(folder))
    # another node's copies (srun's environment came from the batch node) give way; a
    # job without PATH (--export=NONE) gets the one it would have had, after them
    shas = {f"/{p.sha256}" for p in pins}
    if bins or "PATH" in env:
        path = env.get("PATH", DEFAULT_PATH).split(":")
        env["PATH"] = ":".join(bins + [p for p in path if not any(s in p for s in shas)])
    return env


def _root_of(place: Path, name: str) -> tuple[Path, Path | None]:
    """(what ``HAL_ARTIFACT_<NAME>`` names, the folder for PATH): a program's file and
    ``by-name/NAME`` (a link NAME to it, made now: each name its own folder); an archive's
    tree (its one top folder, if it has only that and it is not ``bin``) and its ``bin``."""
    if (place / "file").exists():
        folder = place / "by-name" / name
        if not folder.is_dir():
            (place / "by-name").chmod(0o755)  # (read by the jobs' users)
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o755)
                (folder / name).symlink_to("../../file")
            read_only(place / "by-name")
        return place / "file", folder
    tree = place / "tree"
    entries = list(tree.iterdir())
    one = len(entries) == 1 and entries[0].is_dir() and entries[0].name != "bin"
    root = entries[0] if one else tree
    return root, root / "bin" if (root / "bin").is_dir() else None


def _install(part: Path, place: Path, kind: str) -> Path:
    """Unpack or place the downloaded file in a new folder, then rename it to ``place``."""
    if (place / READY).exists():
        return place  # (another agent sharing the folder did it meanwhile)
    if place.exists():
        remove_tree(place)  # a copy left half-made
    building = place.with_name(f".{place.name}.{secrets.token_hex(4)}.building")
    building.mkdir(mode=0o755)
    try:
        size = _unpack(part, building, kind)
        (building / READY).write_text(str(size))
        read_only(building)
        os.rename(building, place)
    except BaseException:
        remove_tree(building)
        raise
    return place


def _unpack(part: Path, into: Path, kind: str) -> int:
    """The content into ``into``: an archive unpacked into ``tree``, a program kept as
    ``file``; returns the bytes it takes there."""
    if kind != ARCHIVE:
        size = part.stat().st_size
        os.replace(part, into / "file")  # (beside it: a rename, not a second copy)
        os.chmod(into / "file", 0o755)  # noqa: S103 (run by the jobs' users)
        (into / "by-name").mkdir(mode=0o755)
        return size
    import tarfile  # an archive's first unpacking, not every agent's start
    import zipfile

    try:
        if tarfile.is_tarfile(part):
            with tarfile.open(part) as archive:
                _untar(archive, into / "tree")
        elif zipfile.is_zipfile(part):
            with zipfile.ZipFile(part) as archive:
                _unzip(archive, into / "tree")
        else:
            raise ArtifactError(
                "cannot unpack it: it is no tar or zip archive (publish a program with "
                "hal artifact push --kind program)"
            )
    except ArtifactError:
        raise
    except Exception as err:  # a cut-off stream (EOFError), zlib's and lzma's own errors
        raise ArtifactError(f"cannot unpack it: {err.__class__.__name__}: {err}") from err
    return sum(f.stat().st_size for f in (into / "tree").rglob("*") if f.is_file())


def _untar(archive: tarfile.TarFile, into: Path) -> None:
    """Python's ``data`` filter: no absolute paths, nothing outside ``into``, no links
    out, no devices. A Python without it (3.11 before 3.11.4, as Debian 12's may be) gets
    the same checks here, more strictly: links and special files are refused."""
    import tarfile

    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
        return
    into.mkdir(mode=0o755)
    top = into.resolve()
    for member in archive.getmembers():
        target = (into / member.name.lstrip("/")).resolve()
        if top not in target.parents and target != top:
            raise ArtifactError(f"cannot unpack it: {member.name!r} is outside the archive")
        if not (member.isfile() or member.isdir()):
            raise ArtifactError(f"cannot unpack it: {member.name!r} is a link or a device")
    archive.extractall(into)  # noqa: S202 (every member checked above)


def _unzip(archive: zipfile.ZipFile, into: Path) -> None:
    """zipfile keeps no modes: an entry's Unix mode (x bits) is restored from its
    external attributes, and no entry may land outside ``into``."""
    into.mkdir(mode=0o755)
    top = into.resolve()
    for member in archive.infolist():
        target = (into / member.filename).resolve()
        if top not in target.parents and target != top:
            raise ArtifactError(f"cannot unpack it: {member.filename!r} is outside the archive")
        archive.extract(member, into)
        mode = member.external_attr >> 16
        if not member.is_dir() and mode & 0o111:
            os.chmod(target, 0o755)  # noqa: S103 (as it was packed)


def read_only(top: Path) -> None:
    """Files and folders lose their write bits: a job cannot change what another runs."""
    for path in [*top.rglob("*"), top]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) & ~0o222 | (0o555 if path.is_dir() else 0o444))


def remove_tree(top: Path) -> None:
    for path in [top, *top.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):
                path.chmod(0o755)
    shutil.rmtree(top, ignore_errors=True)
