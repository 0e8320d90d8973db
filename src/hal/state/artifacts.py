"""The artifact registry (docs/user/artifacts.md, ADR 0020): published versions and their
content, in the state store.

Content lives in ``artifact_blobs`` in pieces of ``PIECE`` bytes under its SHA-256, so
every server of a cluster reads the same registry from the one database, as it reads
the jobs. An upload is written piece by piece under a name of its own ("upload:ID") while
it is hashed, then renamed to its digest in the transaction that adds the version's row;
an upload that fails or is cut off leaves nothing (and a server that died in the middle
of one deletes its pieces at the next start).

The versions are also kept in memory (``index``), as the jobs are: a submission pins its
artifacts from there without a query.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, func, insert, select, update

from hal.core.artifacts import (
    HEAD,
    IMAGE,
    LATEST,
    Artifact,
    ArtifactRef,
    check_kind,
    check_name,
    check_version,
    kind_of_content,
)
from hal.core.errors import Conflict, InvalidRequest, NotFound, PayloadTooLarge, PermissionDenied
from hal.state import schema
from hal.state.rollout import Aliases, pins_of
from hal.state.store import sql_store

if TYPE_CHECKING:
    from hal.core.job import Job
    from hal.state.cluster import Caller, Cluster

PIECE = 4 * 1024 * 1024
UPLOAD = "upload:"


class Registry:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.index: dict[tuple[str, str], Artifact] = {}
        self.owners: dict[str, str] = {}  # name → who published its first version
        # since the server started (``hal_artifact_*`` metrics): versions published, and
        # downloads and bytes served, to agents ("agent"), to users ("user") and into a
        # cache tree's root ("cache": hal.server.artifact_tree)
        self.published = 0
        self.downloads: Counter[str] = Counter()
        self.served_bytes: Counter[str] = Counter()
        self.aliases = Aliases(self)  # NAME@stable, its canary (hal.state.rollout)
        cluster.on_new_jobs = self.aliases.choose

    async def load(self) -> None:
        """Read the versions, and delete the pieces of uploads a stopped server left."""

        def work() -> tuple[list[Artifact], dict[str, str]]:
            with sql_store(self.cluster.store).engine.begin() as conn:
                t, n, b = schema.artifacts, schema.artifact_names, schema.artifact_blobs
                conn.execute(delete(b).where(b.c.sha256.like(UPLOAD + "%")))
                found = [Artifact(**row._mapping) for row in conn.execute(select(*t.c))]
                return found, {r.name: r.owner for r in conn.execute(select(*n.c))}

        found, self.owners = await self.cluster.db(work)
        self.index = {(a.name, a.version): a for a in found}
        await self.aliases.load()

    # -- reading --------------------------------------------------------------------------

    def listing(self, name: str | None = None) -> list[Artifact]:
        """Every version (of ``name``), by name, the newest version first."""
        found = [a for a in self.index.values() if name is None or a.name == name]
        return sorted(found, key=lambda a: (a.name, -a.created, a.version))

    def find(self, name: str, version: str) -> Artifact:
        """One version; ``latest``: the newest one. NotFound says what there is."""
        if version == LATEST:
            versions = self.listing(name)
            if versions:
                return versions[0]
        elif (found := self.index.get((name, version))) is not None:
            return found
        versions = self.listing(name)
        if not versions:
            raise NotFound(
                f"no artifact {name!r}: publish it first (hal artifact push {name}@VERSION "
                "FILE), or see what there is with hal artifact list"
            )
        listed = ", ".join(a.version for a in versions[:10])
        raise NotFound(f"artifact {name!r} has no version {version!r}; it has {listed}")

    def pin(self, refs: Iterable[ArtifactRef], where: str = "") -> tuple[ArtifactRef, ...]:
        """A submission's artifacts (versions or aliases as asked for) pinned to their
        content; an alias's canary is chosen once the job has its id."""
        try:
            return tuple(self._pin_one(r) for r in refs)
        except NotFound as err:
            raise NotFound(err.message, field=where + "artifacts") from err

    def _pin_one(self, ref: ArtifactRef) -> ArtifactRef:
        if ref.version == LATEST or (ref.name, ref.version) in self.index:
            return self.find(ref.name, ref.version).ref()
        found = self.aliases.resolve(ref.name, ref.version)
        if found is not None:
            return found
        try:
            return self.find(ref.name, ref.version).ref()
        except NotFound as err:
            if not self.listing(ref.name):
                raise
            aliases = ", ".join(a.alias for a in self.aliases.of(ref.name)) or "none"
            raise NotFound(
                f"{err.message}; nor is {ref.version!r} one of its aliases ({aliases}): "
                f"name a version, or point the alias at one (hal artifact promote "
                f"{ref.name}@VERSION --to {ref.version})"
            ) from err

    async def check_content(self, artifact: Artifact) -> None:
        """NotFound unless every piece of ``artifact``'s content is stored (before a
        download starts: once it has, a missing piece can only cut it short)."""
        b = schema.artifact_blobs

        def count() -> int:
            with sql_store(self.cluster.store).engine.connect() as conn:
                query = select(func.count()).where(b.c.sha256 == artifact.sha256)
                return int(conn.execute(query).scalar_one())

        if await self.cluster.db(count) != -(-artifact.size // PIECE):
            raise NotFound(
                f"the content of {artifact.name}@{artifact.version} is missing from the "
                "database; publish it again under a new version"
            )

    async def pieces(self, sha256: str) -> AsyncIterator[bytes]:
        """The content with that digest, piece by piece (one query each)."""
        b = schema.artifact_blobs

        def piece(seq: int) -> bytes | None:
            with sql_store(self.cluster.store).engine.connect() as conn:
                query = select(b.c.data).where(b.c.sha256 == sha256, b.c.seq == seq)
                data: bytes | None = conn.execute(query).scalar_one_or_none()
                return data

        seq = 0
        while (data := await self.cluster.db(piece, seq)) is not None:
            yield data
            seq += 1

    def stored_bytes(self) -> int:
        """The content the published versions hold, each content counted once."""
        return sum({a.sha256: a.size for a in self.index.values()}.values())

    def check_still_there(self, job: Job) -> None:
        """Conflict unless every artifact ``job`` pinned is still published (a job run
        again must find what it pinned)."""
        for ref in job.spec.artifacts:
            found = self.index.get((ref.name, ref.version))
            if found is None or found.sha256 != ref.sha256:
                raise Conflict(
                    f"job {job.display_id} pins {ref}, which has been removed since: it could "
                    f"not start again; submit it anew with a version there is "
                    f"(hal artifact list {ref.name})"
                )

    # -- changing -------------------------------------------------------------------------

    def check_owner(self, name: str, caller: Caller) -> None:
        """A name belongs to whoever published its first version (and administrators),
        even once its versions are all removed."""
        owner = self.owners.get(name)
        if owner is not None and caller.name != owner and not caller.admin:
            raise PermissionDenied(
                f"artifact {name!r} is {owner}'s: only they or an administrator may publish "
                "or remove its versions; choose another name"
            )

    async def publish(
        self,
        name: str,
        version: str,
        caller: Caller,
        chunks: AsyncIterator[bytes],
        expect: str | None = None,
        kind: str | None = None,
    ) -> tuple[Artifact, bool]:
        """Store ``chunks`` as ``name@version``; (the version, whether it is new). The same
        content again is no change; other content under a published version is refused:
        versions are pinned. ``expect``: the digest the sender computed; ``kind``: archive
        or program (None: guessed from the first bytes)."""
        check_name(name)
        check_version(version)
        if kind is not None:
            check_kind(kind)
        self.check_owner(name, caller)
        if (name, version) in self.aliases.by_key and (name, version) not in self.index:
            raise InvalidRequest(
                f"{name}@{version} is an alias (hal artifact aliases {name}); publish the "
                "version under a name no alias has, then promote it",
                field="version",
            )
        upload = UPLOAD + secrets.token_hex(16)
        try:
            sha256, size, head = await self._write(upload, chunks)
            if size == 0:
                raise InvalidRequest("the artifact is empty: send the file's content")
            if expect is not None and expect != sha256:
                raise InvalidRequest(
                    f"the content's sha256 is {sha256}, not {expect} as sent: it was changed "
                    "on the way; send it again"
                )
            now, what = self.cluster.clock.now(), kind or kind_of_content(head)
            if what == IMAGE and head[257:262] != b"ustar":
                raise InvalidRequest(
                    "an image is an OCI image layout tarball (an uncompressed tar): make "
                    "one with `podman save --format oci-archive -o image.oci.tar IMAGE`",
                    field="kind",
                )
            new = Artifact(name, version, sha256, size, caller.name, now, what)
            found, added = await self.cluster.db(self._add, new, upload)
        finally:
            await self.cluster.db(self._drop_upload, upload)
        self.index[(name, version)] = found
        self.owners.setdefault(name, found.owner)
        if added:
            self.published += 1
            return found, True
        if found.sha256 != sha256:
            raise Conflict(
                f"{name}@{version} is published with other content (sha256 "
                f"{found.sha256[:12]}…): versions never change; publish a new version"
            )
        return found, False

    async def _write(self, upload: str, chunks: AsyncIterator[bytes]) -> tuple[str, int, bytes]:
        """(sha256, size, the first bytes) of what was stored under ``upload``."""
        digest, size, seq, buffer, head = hashlib.sha256(), 0, 0, bytearray(), b""
        b = schema.artifact_blobs

        def put(seq: int, data: bytes) -> None:
            with sql_store(self.cluster.store).engine.begin() as conn:
                conn.execute(insert(b).values(sha256=upload, seq=seq, data=data))

        limit = self.cluster.config.max_artifact_bytes  # (scontrol reconfigure changes it)
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(
                    f"the artifact is over this cluster's limit of {limit:,} bytes "
                    "(max_artifact_bytes in hal.toml); split it, or ask an administrator "
                    "to raise the limit"
                )
            digest.update(chunk)
            if len(head) < HEAD:
                head += chunk[: HEAD - len(head)]
            buffer += chunk
            while len(buffer) >= PIECE:
                await self.cluster.db(put, seq, bytes(buffer[:PIECE]))
                del buffer[:PIECE]
                seq += 1
        if buffer:
            await self.cluster.db(put, seq, bytes(buffer))
        return digest.hexdigest(), size, head

    def _add(self, artifact: Artifact, upload: str) -> tuple[Artifact, bool]:
        """The version's row, its name's owner if it is new, and its content under its
        digest (unless another version has that content already), in one transaction;
        (the version stored, whether it is this one). A version published meanwhile (two
        pushes at once) is kept and returned."""
        t, n, b = schema.artifacts, schema.artifact_names, schema.artifact_blobs
        with sql_store(self.cluster.store).engine.begin() as conn:
            there = conn.execute(
                select(*t.c).where(t.c.name == artifact.name, t.c.version == artifact.version)
            ).first()
            if there is not None:
                return Artifact(**there._mapping), False
            if not conn.execute(select(n.c.owner).where(n.c.name == artifact.name)).first():
                conn.execute(insert(n).values(name=artifact.name, owner=artifact.owner))
            if _stored(conn, artifact.sha256):
                conn.execute(delete(b).where(b.c.sha256 == upload))
            else:
                conn.execute(update(b).where(b.c.sha256 == upload).values(sha256=artifact.sha256))
            conn.execute(insert(t).values(**asdict(artifact)))
        return artifact, True

    def _drop_upload(self, upload: str) -> None:
        b = schema.artifact_blobs
        with sql_store(self.cluster.store).engine.begin() as conn:
            conn.execute(delete(b).where(b.c.sha256 == upload))

    async def remove(self, name: str, version: str, caller: Caller) -> Artifact:
        """Delete a version, unless a job that has not ended pins it (its nodes may still
        have to fetch it). Its content goes with the last version that has it."""
        if version.lower() == LATEST:
            raise InvalidRequest(
                f"name the version to remove ({name}@VERSION), not {version!r}", field="version"
            )
        found = self.find(name, version)
        self.check_owner(name, caller)
        named = self.aliases.naming(found.name, found.version)
        if named:
            raise Conflict(
                f"{found.name}@{found.version} is what alias(es) {', '.join(named)} name: "
                f"promote another version to them (or roll them back) first"
            )
        pinning = sorted(
            j.id
            for j in self.cluster.unfinished.values()
            if any((a.name, a.version) == (found.name, found.version) for a in pins_of(j.spec))
        )
        if pinning:
            shown = ", ".join(map(str, pinning[:10])) + (" …" if len(pinning) > 10 else "")
            raise Conflict(
                f"{found.name}@{found.version} is pinned by jobs that have not ended "
                f"({shown}); remove it once they have, or cancel them"
            )
        t, b = schema.artifacts, schema.artifact_blobs

        def work() -> None:
            with sql_store(self.cluster.store).engine.begin() as conn:
                conn.execute(delete(t).where(t.c.name == found.name, t.c.version == found.version))
                if not conn.execute(select(t.c.name).where(t.c.sha256 == found.sha256)).first():
                    conn.execute(delete(b).where(b.c.sha256 == found.sha256))

        await self.cluster.db(work)
        self.index.pop((found.name, found.version), None)
        return found


def _stored(conn: Connection, sha256: str) -> bool:
    b = schema.artifact_blobs
    return bool(conn.execute(select(func.count()).where(b.c.sha256 == sha256)).scalar_one())
