"""The traces the tests replay come with the repository, as its README lists them."""

from __future__ import annotations

import hashlib

import pytest

from hal.testing.traces import TEST_TRACES, trace_path


def test_every_trace_is_the_one_its_sum_names() -> None:
    """``SHA256SUMS`` lists every trace in the folder, and each file has its sum."""
    sums = {}
    for line in (TEST_TRACES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split("  ")
        sums[name] = digest
    assert sorted(sums) == sorted(p.name for p in TEST_TRACES.glob("*.swf.gz"))
    for name, digest in sums.items():
        assert hashlib.sha256(trace_path(name).read_bytes()).hexdigest() == digest, name


def test_every_trace_is_described_in_the_readme() -> None:
    readme = (TEST_TRACES / "README.md").read_text()
    for path in TEST_TRACES.glob("*.swf.gz"):
        assert f"`{path.name}`" in readme, path.name


def test_a_trace_that_is_not_there_is_refused_not_skipped() -> None:
    with pytest.raises(FileNotFoundError, match=r"no test trace 'CEA-Curie-2011-2.1-cln.swf.gz'"):
        trace_path("CEA-Curie-2011-2.1-cln.swf.gz")
