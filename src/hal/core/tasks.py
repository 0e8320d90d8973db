"""Stopping asyncio tasks: cancel them all, then wait for each to finish."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_tasks(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel every task first (so none waits on another that is still running), then
    await each; their ``CancelledError`` is expected and swallowed."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
