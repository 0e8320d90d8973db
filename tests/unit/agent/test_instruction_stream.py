"""``InstructionStream``: the agent applies each numbered instruction once, in order,
however the server's replies repeat or overtake each other."""

from __future__ import annotations

from hal.agent.instructions import InstructionStream
from hal.wire.agent import AgentInstructions, Instruction, Signal


def reply(first_id: int, *signals: int) -> AgentInstructions:
    instructions: list[Instruction] = [Signal(job_id=1, signal=s) for s in signals]
    return AgentInstructions(
        acked_seq=0, instructions=instructions, first_id=first_id, server_time=0.0
    )


def numbers(got: list[Instruction]) -> list[int]:
    return [i.signal for i in got if isinstance(i, Signal)]


def test_a_resent_instruction_is_applied_once() -> None:
    stream = InstructionStream()
    stream.registered(100)
    assert numbers(stream.fresh(reply(100, 1, 2))) == [1, 2]
    assert stream.applied == 101
    # the same two again (the agent's acknowledgement had not reached the server), and a third
    assert numbers(stream.fresh(reply(100, 1, 2, 3))) == [3]
    assert stream.applied == 102


def test_a_reply_that_overtook_an_older_one_brings_the_older_instructions_first() -> None:
    """The long poll's reply (100: a launch) arrives after the flush's (100, 101: the
    launch and a signal for it): the flush's gives both in order, the late one nothing."""
    stream = InstructionStream()
    stream.registered(100)
    assert numbers(stream.fresh(reply(100, 1, 2))) == [1, 2]
    assert numbers(stream.fresh(reply(100, 1))) == []


def test_a_reply_past_the_next_number_brings_nothing_until_the_gap_is_resent() -> None:
    stream = InstructionStream()
    stream.registered(100)
    assert numbers(stream.fresh(reply(101, 2))) == []
    assert stream.applied == 99
    assert numbers(stream.fresh(reply(100, 1, 2))) == [1, 2]


def test_a_late_reply_of_the_session_before_a_registration_brings_nothing() -> None:
    stream = InstructionStream()
    stream.registered(100)
    assert numbers(stream.fresh(reply(100, 1))) == [1]
    stream.registered(5_000)  # the agent registered again; the old session's reply comes late
    assert numbers(stream.fresh(reply(100, 1, 2))) == []
    assert numbers(stream.fresh(reply(5_000, 7))) == [7]


def test_a_server_that_does_not_number_gets_every_instruction_applied() -> None:
    stream = InstructionStream()
    stream.registered(0)
    assert stream.applied is None
    assert numbers(stream.fresh(reply(0, 1, 1))) == [1, 1]
