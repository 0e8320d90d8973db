"""``JobState`` is built on the plain table ``squeue -t`` reads at start-up (without
``enum``): both must name the same states, codes and ends."""

from __future__ import annotations

from hal.core.state_names import JOB_STATE_CODES, JOB_STATES_BY_CODE, TERMINAL_JOB_STATES
from hal.core.states import STATES_BY_CODE, JobState


def test_the_enum_and_the_table_name_the_same_states() -> None:
    assert [state.value for state in JobState] == list(JOB_STATE_CODES)
    assert {state.value: state.code for state in JobState} == JOB_STATE_CODES
    assert {state.value for state in JobState if state.is_terminal} == TERMINAL_JOB_STATES
    assert {code: state.value for code, state in STATES_BY_CODE.items()} == JOB_STATES_BY_CODE
