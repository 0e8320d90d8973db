"""What an interactive shell through ``srun --pty`` feels like: HAL's srun against
Slurm's, on this machine.

    python bench/srun_pty.py [KEYS]

Each side runs ``srun --pty bash --norc --noprofile`` from a login shell, in a real
pseudo-terminal (``hal.testing.terminal``, as a terminal emulator), and measures:

- ``to_prompt_s``: from srun's start to the shell's prompt on the node (the allocation,
  the step, bash's start), once;
- ``echo_ms``: a key typed to its echo shown (the key's way to the node's terminal and
  the echo's way back), KEYS times, each once the last echo is in;
- ``command_ms``: ``true`` + Enter to the next prompt, KEYS / 5 times;
- ``exit_s``: ``exit`` + Enter to srun's exit (the step's end, the allocation given back).

HAL: a live server (SQLite) and one agent. Slurm: the peer (22.05 from Debian: munged +
slurmctld + slurmd in a temporary folder). Prints JSON: each side's medians and rounds.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hal.bench.slurm_peer import SlurmCluster
from hal.testing.live import LiveServer
from hal.testing.terminal import Terminal

PROMPT = b"bench-pty$ "
PROMPTED = re.escape(PROMPT)
# a command's newline, then the prompt (bash's bracketed-paste switches between them)
AFTER_COMMAND = rb"\r\n(?:\x1b\[\?2004[lh]|\r)*" + PROMPTED


def _session(
    prefix: Sequence[str], env: Mapping[str, str], cwd: Path, keys: int
) -> dict[str, object]:
    env = {**env, "PS1": PROMPT.decode(), "TERM": "xterm"}
    argv = [*prefix, "srun", "--pty", "bash", "--norc", "--noprofile"]
    began = time.monotonic()
    term = Terminal(argv, env, cwd, (24, 80))
    try:
        term.expect(PROMPTED, timeout=120)
        to_prompt = time.monotonic() - began
        echoes = []
        for i in range(keys):
            key = b"abcdefghij"[i % 10 : i % 10 + 1]
            began = time.monotonic()
            term.type(key)
            term.expect(re.escape(key))
            echoes.append((time.monotonic() - began) * 1000)
        term.type(b"\x15")  # (Ctrl-U: the typed line dropped)
        commands = []
        for _ in range(max(1, keys // 5)):
            term.type(b"true\r")
            began = time.monotonic()
            term.expect(AFTER_COMMAND)
            commands.append((time.monotonic() - began) * 1000)
        began = time.monotonic()
        term.type(b"exit\r")
        code = term.wait(120)
        took_exit = time.monotonic() - began
    finally:
        term.close()
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {code}")
    return {
        "to_prompt_s": round(to_prompt, 3),
        "echo_ms": {"median": round(statistics.median(echoes), 1), "max": round(max(echoes), 1)},
        "command_ms": {"median": round(statistics.median(commands), 1)},
        "exit_s": round(took_exit, 3),
        "echo_rounds_ms": [round(x, 1) for x in echoes],
    }


def main() -> None:
    keys = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    with tempfile.TemporaryDirectory(prefix="hal-pty-bench-") as tmp:
        work = Path(tmp)
        with LiveServer(work / "hal") as live, live.agents(1, cpus=2):
            env = {k: v for k, v in live.env().items() if not k.startswith("SLURM_")}
            env["PATH"] = os.environ.get("PATH", "")
            hal = _session([os.path.abspath(sys.executable), "-m", "hal.cli.main"], env, work, keys)
        with SlurmCluster() as slurm:
            slurm_side = _session([], slurm.env, work, keys)
    print(json.dumps({"keys": keys, "hal": hal, "slurm": slurm_side}, indent=2))


if __name__ == "__main__":
    main()
