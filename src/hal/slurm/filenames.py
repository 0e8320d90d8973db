"""Slurm's output/error file-name patterns (``sbatch --output``).

The agent expands them for real when it launches a job, because ``%N`` (host name) and
``%n`` (node index) are only known on the node; the server uses the same rules to show
the paths (``scontrol show job``, the dashboard) before and after the job runs.
Rules, from sbatch(1) "FILENAME PATTERN":

- ``%j`` job id, ``%A`` array master id (the job id outside an array), ``%a`` array index
  (4294967294, Slurm's NO_VAL, outside an array), ``%x`` job name, ``%u`` user, ``%N``
  short host name, ``%n`` node index, ``%t`` task rank, ``%s`` step (``batch`` for a batch
  script), ``%J`` ``jobid.step`` (the job id alone for a batch script: Slurm 22.05.8 names
  ``-o x_%J.txt`` ``x_62.txt``), ``%%`` a literal ``%``. srun ``-o``/``-e`` use the same
  rules with the step's id and each task's rank (``hal.compat.srun_output``).
- A number between ``%`` and the letter zero-pads numeric values: ``%4j`` → ``0128``.
- A backslash anywhere turns expansion off; the backslashes are removed.
- Unknown letters are left as written, so a typo shows up in the file name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hal.core.job import NO_VAL_ARRAY_INDEX

MAX_WIDTH = 10  # Slurm caps the padding width; a longer one would only be a typo
BATCH_STEP = "batch"


@dataclass(frozen=True, slots=True)
class FilenameFields:
    job_id: int
    name: str
    user: str
    node: str
    node_index: int = 0
    array_job_id: int | None = None
    array_task_id: int | None = None
    step: int | None = None  # a step's id (srun -o); None: the batch script
    task: int = 0  # the task's rank (a batch script is task 0)

    def value(self, letter: str) -> tuple[str, bool] | None:
        """The text for ``%letter`` and whether it is a number (and so may be padded)."""
        numbers = {
            "j": self.job_id,
            "A": self.array_job_id if self.array_job_id is not None else self.job_id,
            "a": self.array_task_id if self.array_task_id is not None else NO_VAL_ARRAY_INDEX,
            "n": self.node_index,
            "t": self.task,
        }
        if letter in numbers:
            return str(numbers[letter]), True
        texts = {
            "x": self.name,
            "u": self.user,
            "N": self.node.split(".")[0],
            "s": BATCH_STEP if self.step is None else str(self.step),
            "J": str(self.job_id) if self.step is None else f"{self.job_id}.{self.step}",
        }
        if letter in texts:
            return texts[letter], False
        return None


def expand_filename(pattern: str, fields: FilenameFields) -> str:
    if "\\" in pattern:
        return pattern.replace("\\", "")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] != "%":
            out.append(pattern[i])
            i += 1
            continue
        j = i + 1
        while j < len(pattern) and pattern[j].isdigit():
            j += 1
        if j >= len(pattern):  # a trailing "%" or "%12": nothing to expand
            out.append(pattern[i:])
            break
        letter = pattern[j]
        if letter == "%":
            out.append("%")
        else:
            found = fields.value(letter)
            if found is None:
                out.append(pattern[i : j + 1])
            else:
                text, numeric = found
                width = min(int(pattern[i + 1 : j] or 0), MAX_WIDTH)
                out.append(text.zfill(width) if numeric else text)
        i = j + 1
    return "".join(out)


def output_paths(
    stdout: str, stderr: str | None, workdir: str, fields: FilenameFields, *, array: bool
) -> tuple[str, str | None]:
    """Absolute stdout and stderr paths; stderr is ``None`` when it shares stdout's file.

    An empty stdout pattern means Slurm's default, ``slurm-%j.out`` (``slurm-%A_%a.out``
    for an array element), in the working directory.
    """
    pattern = stdout or ("slurm-%A_%a.out" if array else "slurm-%j.out")
    out = os.path.join(workdir, expand_filename(pattern, fields))
    if not stderr:
        return out, None
    err = os.path.join(workdir, expand_filename(stderr, fields))
    return out, (None if err == out else err)
