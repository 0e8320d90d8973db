"""srun's own stdin for a step's tasks on other nodes, on the server (ADR 0012, "srun's
input"): srun sends it by offset (``POST .../steps/{n}/input``), the server passes it to
the agents of the nodes whose tasks read it (``StepInput``, by offset), and the agents
say how far each task got (``StepOutput`` of stream ``stdin``).

What the server holds of a step's input is bounded (``RELAY_BYTES``): the bytes from
the slowest task's place on, sent to the agents or not. srun's request waits while it is
full (backpressure, not loss), so a task that reads slowly slows srun, as a pipe would;
one that ended or closed its stdin holds nothing back. Every byte is sent to each node
once per agent session; an agent that registers again gets all from where its slowest
task was (it skips what its input file has).

A server restart loses what the relay held, so srun keeps what it sent until every task
has been given it (the reply's ``given``: ``base``), and says in each request from where
it still holds (``kept``). A restarted server takes up the relay with the step's readers
(``running_steps.relay``), unplaced: srun's first request places it at ``kept``, the
reply sends srun back there, and srun sends again what the old server may not have
passed on (the agents skip what they have).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from dataclasses import dataclass, field

from hal.wire.agent import StepInput

RELAY_BYTES = 4 << 20  # a step's input the server holds, from its slowest task's place on
CHUNK_BYTES = 256 << 10  # per StepInput instruction
Place = tuple[str, int]  # (node, rank)


@dataclass(frozen=True, slots=True)
class InputTaken:
    """The answer to srun's input request: it sends on from ``offset`` (below its own:
    again from there), may drop what is before ``given`` (every task has been given it);
    ``closed``: no task reads more, srun stops; ``lost``: a server that kept no readers
    lost it, and the tasks were given its end."""

    offset: int
    given: int
    closed: bool = False
    lost: bool = False


@dataclass(slots=True)
class InputRelay:
    """One step's relayed input. ``readers``: each node's ranks that read it."""

    job_id: int
    step_id: int
    attempt: int
    readers: dict[str, tuple[int, ...]]
    base: int = 0  # the offset of ``data[0]``: every task has been given what is before
    data: bytearray = field(default_factory=bytearray)
    end: int | None = None  # srun's input ended there
    sent: dict[str, int] = field(default_factory=dict)  # node → pushed up to, this session
    ended_to: set[str] = field(default_factory=set)  # nodes pushed the end, this session
    fed: dict[Place, int] = field(default_factory=dict)  # how far each task got
    closed: set[Place] = field(default_factory=set)  # tasks that take no more
    gone: set[str] = field(default_factory=set)  # nodes whose part ended
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    placed: bool = True  # False: taken up by a restarted server, srun's ``kept`` not known

    @property
    def top(self) -> int:
        """What the server has been given: every byte before it."""
        return self.base + len(self.data)

    @property
    def done(self) -> bool:
        """No task reads any more of it: srun sends no more."""
        return not self._live()

    def space(self) -> int:
        return max(0, RELAY_BYTES - len(self.data))

    def take(self, offset: int, data: bytes, eof: bool, kept: int | None = None) -> int:
        """srun's bytes ``offset..`` (what the server has is skipped; what does not fit
        waits for srun's next request); returns ``top``, below ``offset`` where srun
        must send again from there. ``eof`` counts once all before it is in. ``kept``:
        srun holds its input from there on (places a taken-up relay)."""
        if self.done:
            return offset + len(data)  # (nobody reads: taken and dropped)
        if not self.placed:
            if kept is None:
                return self.top  # (a resize alone)
            self.base, self.placed = kept, True
        if offset <= self.top < offset + len(data):
            fresh = data[self.top - offset :][: self.space()]
            self.data.extend(fresh)
        if eof and self.end is None and offset + len(data) == self.top:
            self.end = self.top
        return self.top

    def pushes(self, node: str) -> list[StepInput]:
        """The instructions that bring ``node`` what it was not sent yet (and the end)."""
        if node in self.gone or node not in self.readers:
            return []
        out = []
        at = max(self.sent.get(node, self.base), self.base)
        while at < self.top:
            part = bytes(self.data[at - self.base : at - self.base + CHUNK_BYTES])
            eof = self.end is not None and at + len(part) == self.end
            out.append(self._instruction(at, part, eof))
            at += len(part)
            if eof:
                self.ended_to.add(node)
        self.sent[node] = at
        if self.end is not None and at == self.end and node not in self.ended_to:
            out.append(self._instruction(at, b"", True))
            self.ended_to.add(node)
        return out

    def lost(self) -> StepInput:
        """The end, where each agent has it (a restarted server lost the rest)."""
        return self._instruction(0, b"", eof=False, lost=True)

    def registered(self, node: str) -> None:
        """``node``'s agent registered again (its instructions of the session before are
        dropped): send it all again from its slowest task's place."""
        places = [p for p in self._places(node) if p not in self.closed]
        self.sent[node] = min((self.fed.get(p, 0) for p in places), default=self.top)
        self.ended_to.discard(node)

    def progress(self, node: str, rank: int, offset: int, closed: bool) -> None:
        """``node``'s agent: task ``rank`` was given the input up to ``offset`` (or takes
        no more)."""
        place = (node, rank)
        if rank not in self.readers.get(node, ()):
            return
        if closed:
            self.closed.add(place)
        self.fed[place] = max(self.fed.get(place, 0), offset)
        self._trim()

    def node_ended(self, node: str) -> None:
        self.gone.add(node)
        self._trim()

    def _places(self, node: str) -> list[Place]:
        return [(node, rank) for rank in self.readers.get(node, ())]

    def _live(self) -> list[Place]:
        return [
            p
            for node in self.readers
            if node not in self.gone
            for p in self._places(node)
            if p not in self.closed
        ]

    def _trim(self) -> None:
        """Drop what every task that still reads has been given; wake srun."""
        live = self._live()
        low = min((self.fed.get(p, 0) for p in live), default=self.top)
        low = min(low, self.top)
        if low > self.base:
            del self.data[: low - self.base]
            self.base = low
        self.changed.set()

    def _instruction(self, offset: int, data: bytes, eof: bool, lost: bool = False) -> StepInput:
        return StepInput(
            job_id=self.job_id,
            step_id=self.step_id,
            attempt=self.attempt,
            offset=offset,
            data_b64=base64.b64encode(data).decode(),
            eof=eof,
            lost=lost,
        )


def readers(
    nodes: Sequence[str], ranks: Sequence[Sequence[int]], only: int | None
) -> dict[str, tuple[int, ...]]:
    """Each node's ranks that read srun's input: all (``-i all``), or rank ``only``'s."""
    found = {
        node: tuple(r for r in mine if only is None or r == only)
        for node, mine in zip(nodes, ranks, strict=True)
    }
    return {node: mine for node, mine in found.items() if mine}
