"""``GroupCommitter``: makes the directory's journal durable before requests are answered.

Every request that changed something awaits ``commit()``. The first waiter starts a flush of
the current journal on the single writer thread; requests arriving while it runs wait for
the *next* flush, which then covers all of them in one transaction. So one slow commit costs
every waiting request one transaction, not one each: that is what lets single-event posts
from many nodes go faster than the database's commit rate.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from hal.cache.directory import CacheDirectory
from hal.cache.store import Journal, SqlCacheStore

log = logging.getLogger("hal.cache.committer")


class GroupCommitter:
    def __init__(self, directory: CacheDirectory, store: SqlCacheStore) -> None:
        self.directory = directory
        self.store = store
        # one thread: SQLite wants a single writer, and flushes must not overtake each other
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hal-cache-db")
        self._running: asyncio.Future[None] | None = None
        self._next: asyncio.Future[None] | None = None

    async def commit(self) -> None:
        """Return once everything journaled so far is in the database."""
        if not self.directory.journal:
            if self._running is not None:
                # an earlier flush may still hold changes this request read; wait for it
                await asyncio.shield(self._running)
            return
        if self._running is None:
            await self._flush()
            return
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._next)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._running = done
        try:
            while True:
                journal = self.directory.journal
                self.directory.journal = Journal()
                try:
                    await loop.run_in_executor(self._executor, self.store.write, journal)
                except Exception as err:
                    log.exception("cache store write failed")
                    # Keep the failed rows for the next flush. Memory already holds them, so
                    # a client's retry (a replayed event is a no-op) would journal nothing
                    # and the change would be lost at the next restart.
                    self.directory.journal = journal.then(self.directory.journal)
                    _finish(done, err)
                    _finish(self._next, err)
                    self._next = None
                    raise
                _finish(done, None)
                if self._next is None:
                    return
                # requests queued while we wrote: write their changes as one more flush
                done, self._next = self._next, None
                self._running = done
        finally:
            self._running = None

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def load(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.store.migrate)
        insts, rows = await loop.run_in_executor(self._executor, self.store.load)
        self.directory.restore(insts, rows)
        log.info("cache directory loaded", extra={"instances": len(insts), "copies": len(rows)})


def _finish(fut: asyncio.Future[None] | None, err: BaseException | None) -> None:
    if fut is None or fut.done():
        return
    if err is None:
        fut.set_result(None)
    else:
        fut.set_exception(err)
        # the waiter may already be gone (client disconnected): do not warn about it
        fut.exception()
