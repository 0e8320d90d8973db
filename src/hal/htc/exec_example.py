#!/usr/bin/env python3
"""An executable HTC service (``hal.htc.examples.EXECUTABLE``), written against the bare
protocol of ``hal.htc.service`` with the standard library only, as a program in any
language would be: read a 4-byte little-endian length and that many bytes, answer the
same way, until stdin closes.

Requests: ``sleep:MS`` sleeps and answers ``slept``; ``fail:TEXT`` reports a failure
(length 0xFFFFFFFF, then TEXT length-prefixed); ``crash`` exits with status 7; anything
else comes back upper-cased.
"""

import os
import struct
import sys
import time

LENGTH = struct.Struct("<I")
FAILURE_MARK = 0xFFFFFFFF


def reply(body: bytes, *, failed: bool = False) -> None:
    out = sys.stdout.buffer
    if failed:
        out.write(LENGTH.pack(FAILURE_MARK))
    out.write(LENGTH.pack(len(body)) + body)
    out.flush()


def main() -> int:
    stdin = sys.stdin.buffer
    while True:
        header = stdin.read(4)
        if len(header) < 4:
            return 0  # stdin closed: the worker is done with us
        (size,) = LENGTH.unpack(header)
        request = stdin.read(size)
        if request.startswith(b"sleep:"):
            time.sleep(int(request[6:]) / 1000)
            reply(b"slept")
        elif request.startswith(b"fail:"):
            reply(request[5:], failed=True)
        elif request == b"crash":
            os._exit(7)
        else:
            reply(request.upper())


if __name__ == "__main__":
    sys.exit(main())
