"""``UsageMemo``: a standby server's read ahead of the fair-share history, kept between
reads (``hal.server.priority.PriorityService.preload``). At its takeover the new leader's
``PriorityService.start`` charges every run that ended within the usage window; read
cold, that is every such ``jobs`` row fetched and its spec's JSON decoded (seconds, at a
few thousand finished runs on a loaded machine). The memo keeps what each run is charged
(its charge, as the caller computes it from a ``FinishedRun``) with its row's version
(``xmin``, PostgreSQL): a read asks for the versions of the window's runs and fetches
only those it has not at that version (``SqlStateStore.finished_usage_changed``), and
answers the charges in the cold read's order, so the usage charged from them is the
same number, to the last bit, as a cold read's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from hal.state.codec import stale_versions
from hal.state.rows import FinishedRun

T = TypeVar("T")


class UsageMemo(Generic[T]):
    """The charges of finished runs by job id, each with its row's version. ``charge``
    turns a run read into what is kept of it (a few numbers, not the run's allocation
    or spec: a standby keeps the whole usage window)."""

    def __init__(self, charge: Callable[[FinishedRun], T]) -> None:
        self.charge = charge
        self._runs: dict[int, tuple[int, T]] = {}  # id: (xmin, charge)
        self.hits = 0  # of the last read, the runs taken as kept (reset by ``stale``)

    def __len__(self) -> int:
        return len(self._runs)

    def stale(self, versions: Iterable[tuple[int, int]]) -> list[int]:
        """Of ``(id, xmin)`` pairs, the ids whose run this memo has not at that version."""
        stale, self.hits = stale_versions(self._runs, versions)
        return stale

    def put(self, run: FinishedRun, version: int) -> None:
        self._runs[run.id] = (version, self.charge(run))

    def keep(self, ids: set[int]) -> None:
        """Forget the runs a whole read did not return (purged, requeued, out of the
        window)."""
        for gone in self._runs.keys() - ids:
            del self._runs[gone]

    def charges(self, ids: Iterable[int]) -> list[T]:
        """The kept charges of ``ids``, in their order."""
        runs = self._runs
        return [runs[job_id][1] for job_id in ids]
