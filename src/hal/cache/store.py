"""``SqlCacheStore``: the control plane's durable record (SQLite by default, PostgreSQL by URL).

The control plane answers from memory; this store only has to (1) write every change before
the request that made it is answered and (2) hand the whole state back at start-up. Writes
arrive as a ``Journal`` of final row states (see ``hal.cache.directory``), so one flush is a
handful of ``executemany`` calls however many requests it covers.

Strings from clients (keys, ids from event bodies) may hold NUL or lone surrogates, which
PostgreSQL text rejects, and keys may be longer than a btree index entry: so rows are keyed
by a digest, and client strings are stored JSON-escaped (pure ASCII).

The table names carry a ``cache_`` prefix so the cache can share the main server's database.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    delete,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from hal.cache.contentmap import Entry
from hal.cache.registry import Instance
from hal.db import is_sqlite, make_engine, normalise_url

metadata = MetaData()

instances = Table(
    "cache_instances",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("doc", Text, nullable=False),
)

content = Table(
    "cache_content",
    metadata,
    Column("row_id", String(32), primary_key=True),
    Column("inst_digest", String(32), nullable=False, index=True),
    Column("instance_id", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("origin", Boolean, nullable=False),
    Column("stale", Boolean, nullable=False),
    Column("last_accessed", Float, nullable=True),
)


@dataclass(slots=True)
class Journal:
    """Final row states since the last flush. Later changes to a row replace earlier ones."""

    dropped: set[str] = field(default_factory=set)
    instances: dict[str, Instance | None] = field(default_factory=dict)
    content: dict[tuple[str, str], Entry | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.dropped or self.instances or self.content)

    def drop_instance(self, instance_id: str) -> None:
        # earlier content changes of that instance are superseded by the drop
        for row in [r for r in self.content if r[0] == instance_id]:
            del self.content[row]
        self.dropped.add(instance_id)
        self.instances[instance_id] = None

    def then(self, later: Journal) -> Journal:
        """This journal followed by ``later``, as one: what to write after this one failed.

        Row states in ``later`` are newer and win; its drops remove this journal's rows of
        that instance first, exactly as if both had been recorded into one journal."""
        for instance_id in later.dropped:
            self.drop_instance(instance_id)
        self.instances.update(later.instances)
        self.content.update(later.content)
        return self


def _digest(*parts: str) -> str:
    raw = json.dumps(parts).encode()
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def instance_doc(inst: Instance) -> str:
    return json.dumps(
        {
            "address": inst.address,
            "tier": inst.tier,
            "region": inst.region,
            "parentId": inst.parent_id,
            "maxSize": inst.max_size,
            "metadata": inst.metadata,
            "registeredAt": inst.registered_at,
            "lastHeartbeat": inst.last_heartbeat,
            "hitRate": inst.hit_rate,
            "healthy": inst.healthy,
        }
    )


def instance_from_doc(instance_id: str, doc: str) -> Instance:
    d = json.loads(doc)
    return Instance(
        id=instance_id,
        address=d["address"],
        tier=d["tier"],
        region=d.get("region"),
        parent_id=d.get("parentId"),
        max_size=d.get("maxSize"),
        metadata=d.get("metadata") or {},
        registered_at=d.get("registeredAt") or 0.0,
        last_heartbeat=d.get("lastHeartbeat"),
        hit_rate=d.get("hitRate"),
        healthy=d.get("healthy", True),
        verified=False,
    )


class SqlCacheStore:
    """Synchronous; the control plane calls it from one writer thread."""

    def __init__(self, url: str) -> None:
        self.url = normalise_url(url)
        self.is_sqlite = is_sqlite(self.url)
        self.engine: Engine = make_engine(self.url)
        # built once: constructing upserts per write costs more than the write itself
        dialect = sqlite if self.is_sqlite else postgresql
        ins = dialect.insert(instances)
        self._put_instance = ins.on_conflict_do_update(
            index_elements=["id"], set_={"doc": ins.excluded.doc}
        )
        cins = dialect.insert(content)
        self._put_content = cins.on_conflict_do_update(
            index_elements=["row_id"],
            set_={c: cins.excluded[c] for c in ("size", "origin", "stale", "last_accessed")},
        )
        self._drop_content = delete(content).where(content.c.inst_digest == bindparam("d"))
        self._drop_instance = delete(instances).where(instances.c.id == bindparam("i"))
        self._del_content = delete(content).where(content.c.row_id == bindparam("r"))

    def migrate(self) -> None:
        metadata.create_all(self.engine, checkfirst=True)

    def close(self) -> None:
        self.engine.dispose()

    def load(self) -> tuple[list[Instance], list[tuple[str, str, Entry]]]:
        with self.engine.connect() as conn:
            insts = [instance_from_doc(r.id, r.doc) for r in conn.execute(select(instances))]
            rows = [
                (
                    json.loads(r.instance_id),
                    json.loads(r.key),
                    Entry(
                        size=r.size, origin=r.origin, stale=r.stale, last_accessed=r.last_accessed
                    ),
                )
                for r in conn.execute(select(content))
            ]
        return insts, rows

    def write(self, journal: Journal) -> None:
        """Apply one journal in one transaction (order: drops, instances, content)."""
        with self.engine.begin() as conn:
            if journal.dropped:
                conn.execute(self._drop_content, [{"d": _digest(i)} for i in journal.dropped])
            gone = [i for i, inst in journal.instances.items() if inst is None]
            if gone:
                conn.execute(self._drop_instance, [{"i": i} for i in gone])
            kept = [inst for inst in journal.instances.values() if inst is not None]
            if kept:
                conn.execute(
                    self._put_instance,
                    [{"id": inst.id, "doc": instance_doc(inst)} for inst in kept],
                )
            removed = [row for row, entry in journal.content.items() if entry is None]
            if removed:
                conn.execute(self._del_content, [{"r": _digest(i, k)} for i, k in removed])
            puts = [(row, entry) for row, entry in journal.content.items() if entry is not None]
            if puts:
                conn.execute(
                    self._put_content,
                    [
                        {
                            "row_id": _digest(i, k),
                            "inst_digest": _digest(i),
                            "instance_id": json.dumps(i),
                            "key": json.dumps(k),
                            "size": e.size,
                            "origin": e.origin,
                            "stale": e.stale,
                            "last_accessed": e.last_accessed,
                        }
                        for (i, k), e in puts
                    ],
                )
