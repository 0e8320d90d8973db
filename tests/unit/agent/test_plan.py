"""How a spooled batch script is executed."""

from __future__ import annotations

import pytest

from hal.agent.plan import LaunchError, script_argv


@pytest.mark.parametrize(
    ("script", "argv"),
    [
        ("echo hi\n", ("/bin/sh", "/s")),
        ("#!/bin/bash\necho\n", ("/bin/bash", "/s")),
        ("#!/usr/bin/env python3\n", ("/usr/bin/env", "python3", "/s")),
        ("#! /bin/bash -e -x\n", ("/bin/bash", "-e -x", "/s")),  # one argument, as the kernel
        ("#!\n", ("/bin/sh", "/s")),
        ("#!/bin/sh", ("/bin/sh", "/s")),
    ],
)
def test_script_argv(script: str, argv: tuple[str, ...]) -> None:
    assert script_argv(script, "/s") == argv


def test_relative_interpreter_is_refused() -> None:
    with pytest.raises(LaunchError):
        script_argv("#!bash\n", "/s")
