"""Limits on numbers that reach the database or a clock, shared by the wire schemas.

Standard library only: ``hal.wire.submit`` (imported by every ``sbatch``) uses them.
"""

from __future__ import annotations

# The database's BIGINT: a larger count fails the insert (a 500, not a 400).
INT64_MAX = 2**63 - 1
# ... and its INTEGER (a node's CPUs and GPUs are stored as one)
INT32_MAX = 2**31 - 1
# Times (Unix seconds) and durations end by 5000-01-01T00:00:00Z, so a start plus a
# duration is still a date Python's datetime can show (up to the year 9999).
LATEST_SECONDS = 95_617_584_000
# Fair tree's Level Fairshare of an association that used nothing is infinite; like
# Slurm (which stores NO_VAL), the wire carries this finite stand-in, JSON has no inf
# (``sshare`` prints it as ``inf``).
LEVEL_FS_INFINITE = 4_294_967_294.0
