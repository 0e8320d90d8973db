"""Which instructions of a reply are new: each once, in the server's order.

The server numbers a node's instructions and resends those the agent has not said it
applied (``hal.wire.agent``). Two syncs may be in flight (the long poll and a flush), so a
reply may repeat instructions an earlier one brought, or overtake a reply with older
ones; ``InstructionStream`` lets through only the next numbers, one by one.
"""

from __future__ import annotations

from hal.wire.agent import AgentInstructions, Instruction


class InstructionStream:
    """The agent's side of the numbering: ``applied`` is the last number applied, sent
    with every sync; None while the server does not number (every instruction is new)."""

    def __init__(self) -> None:
        self.applied: int | None = None

    def registered(self, instructions_from: int) -> None:
        """A new session starts at ``instructions_from`` (0: the server does not number);
        a late reply of the one before is older and brings nothing."""
        self.applied = instructions_from - 1 if instructions_from > 0 else None

    def fresh(self, reply: AgentInstructions) -> list[Instruction]:
        """The instructions of ``reply`` not applied yet, in order; they count as applied
        once returned. A reply that starts past the next number (it cannot, while the
        server resends from the last number it heard of) brings nothing: the missing
        ones and what follows come again with the next reply."""
        if self.applied is None or reply.first_id == 0:
            return list(reply.instructions)
        skip = self.applied + 1 - reply.first_id
        if skip < 0:
            return []
        new = reply.instructions[skip:]
        self.applied += len(new)
        return list(new)
