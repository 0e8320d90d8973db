"""The facade's Slurm error numbers and texts are Slurm's own: the table below was read
from libslurm 22.05.8's ``slurm_strerror()`` (Debian's slurm-wlm), and where libslurm is
installed the test reads it again."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob

import pytest

from hal.api.slurmrest import envelope as e

# slurm_strerror(N) of libslurm.so.38 (Slurm 22.05.8)
CHECKED = {
    -1: "Unspecified error",
    22: "Invalid argument",
    1007: "Protocol authentication error",
    2000: "Invalid partition name specified",
    2002: "Access/permission denied",
    2009: "Job script not specified",
    2014: "Requested node configuration is not available",
    2017: "Invalid job id specified",
    2018: "Invalid node name specified",
    2021: "Job/step already completing or completed",
    2084: "Job has already finished",
    9000: "Query empty or not RFC7320 compliant",
    9001: "Failure during parsing",
    9002: "Jobs description entry not found, empty or not dictionary or list",
    9003: "Nothing found with query",
}

USED = [
    e.SLURM_ERROR,
    e.EINVAL,
    e.PROTOCOL_AUTHENTICATION_ERROR,
    e.INVALID_PARTITION_NAME,
    e.ACCESS_DENIED,
    e.JOB_SCRIPT_MISSING,
    e.REQUESTED_NODE_CONFIG_UNAVAILABLE,
    e.INVALID_JOB_ID,
    e.INVALID_NODE_NAME,
    e.ALREADY_DONE,
    e.JOB_FINISHED,
    e.REST_INVALID_QUERY,
    e.REST_FAIL_PARSING,
    e.REST_INVALID_JOBS_DESC,
    e.REST_EMPTY_RESULT,
]


def test_every_number_the_facade_uses_has_slurms_text() -> None:
    assert {number: text for number, text in USED} == CHECKED


def _libslurm() -> ctypes.CDLL | None:
    # libslurm38's library, or the one slurm-wlm's daemons link (which CI installs)
    found = ctypes.util.find_library("slurm") or next(
        iter(
            sorted(glob.glob("/usr/lib/*/libslurm.so*"))
            + sorted(glob.glob("/usr/lib/*/slurm-wlm/libslurmfull.so"))
        ),
        None,
    )
    if found is None:
        return None
    lib = ctypes.CDLL(found)
    lib.slurm_strerror.restype = ctypes.c_char_p
    lib.slurm_strerror.argtypes = [ctypes.c_int]
    return lib


def test_the_table_is_libslurms_where_it_is_installed() -> None:
    lib = _libslurm()
    if lib is None:
        pytest.skip("libslurm is not installed (Debian: slurm-wlm)")
    assert {n: lib.slurm_strerror(n).decode() for n in CHECKED} == CHECKED


@pytest.mark.parametrize(
    ("errno", "status"),
    [(e.REST_FAIL_PARSING, 400), (e.REST_INVALID_QUERY, 400), (e.INVALID_JOB_ID, 500)],
)
def test_http_status_follows_slurmrestd(errno: tuple[int, str], status: int) -> None:
    assert e.http_status([e.error_entry(errno, "x")]) == status
