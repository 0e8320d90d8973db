"""sbatch's FILENAME PATTERN rules, as users type them."""

from __future__ import annotations

import pytest

from hal.slurm.filenames import FilenameFields, expand_filename, output_paths

JOB = FilenameFields(job_id=128, name="train", user="ana", node="gpu07.cluster", node_index=2)
ELEMENT = FilenameFields(
    job_id=130, name="sweep", user="ana", node="n1", array_job_id=100, array_task_id=7
)


@pytest.mark.parametrize(
    ("pattern", "fields", "expected"),
    [
        ("slurm-%j.out", JOB, "slurm-128.out"),
        ("job%4j.out", JOB, "job0128.out"),
        ("%x-%u-%N-%n-%t.log", JOB, "train-ana-gpu07-2-0.log"),
        ("%A_%a.out", JOB, "128_4294967294.out"),
        ("%A_%a.out", ELEMENT, "100_7.out"),
        ("%A_%3a.out", ELEMENT, "100_007.out"),
        ("%J-%s.out", JOB, "128-batch.out"),  # (Slurm 22.05.8: no .batch in %J)
        ("100%%-%j", JOB, "100%-128"),
        ("%12x", JOB, "train"),  # padding applies to numbers only
        ("%20j", JOB, "0000000128"),  # width capped at 10
        ("odd-%q-%", JOB, "odd-%q-%"),  # unknown letters and a trailing % stay
        ("raw\\%j.out", JOB, "raw%j.out"),  # a backslash disables expansion
        ("no-pattern.txt", JOB, "no-pattern.txt"),
    ],
)
def test_expand(pattern: str, fields: FilenameFields, expected: str) -> None:
    assert expand_filename(pattern, fields) == expected


def test_paths_are_relative_to_the_workdir_and_stderr_defaults_to_stdout() -> None:
    assert output_paths("o-%j", None, "/w", JOB, array=False) == ("/w/o-128", None)
    assert output_paths("/abs/o", "e-%j", "/w", JOB, array=False) == ("/abs/o", "/w/e-128")
    assert output_paths("same", "same", "/w", JOB, array=False) == ("/w/same", None)


def test_empty_pattern_means_slurms_default() -> None:
    assert output_paths("", None, "/w", JOB, array=False) == ("/w/slurm-128.out", None)
    assert output_paths("", None, "/w", ELEMENT, array=True) == ("/w/slurm-100_7.out", None)
