"""Where an emulated job's run time and exit code come from (``hal.agent.emulate``):
its environment wins over its script's ``#HAL_EMULATE`` line, which wins over the
emulator's default; a hint that is no number is ignored."""

from __future__ import annotations

import pytest

from hal.agent.emulate import Runtime, job_runtime
from hal.wire.agent import Launch


def launch(script: str = "#!/bin/sh\n", **env: str) -> Launch:
    return Launch(
        job_id=1,
        attempt=0,
        name="j",
        user="alice",
        script=script,
        workdir="/tmp",
        environment=env,
        stdout="",
        stderr=None,
        time_limit_seconds=0,
        memory_bytes=0,
        cpus=1,
        nodes=["emu1"],
        node_index=0,
    )


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (launch(), Runtime(60.0, 0)),
        (launch("#!/bin/sh\n#HAL_EMULATE runtime=7 exit=3\nsleep 9\n"), Runtime(7.0, 3)),
        (launch("#!/bin/sh\n#HAL_EMULATE runtime=7\n", HAL_EMULATE_RUNTIME="2.5"), Runtime(2.5, 0)),
        (launch(HAL_EMULATE_RUNTIME="1", HAL_EMULATE_EXIT="300"), Runtime(1.0, 255)),
        (launch(HAL_EMULATE_RUNTIME="soon"), Runtime(60.0, 0)),
        (launch(HAL_EMULATE_RUNTIME="inf"), Runtime(60.0, 0)),
        (launch(HAL_EMULATE_RUNTIME="-4"), Runtime(0.0, 0)),
        (launch("#!/bin/sh\necho '#HAL_EMULATE runtime=5'\n"), Runtime(60.0, 0)),
    ],
)
def test_the_run_time_hint_that_wins(job: Launch, expected: Runtime) -> None:
    assert job_runtime(job, 60.0) == expected
