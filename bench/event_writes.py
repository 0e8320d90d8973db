"""How many writes the event stream takes for a burst: N trivial jobs submitted one
request at a time to a ``hal up`` cluster (2 agents) while a follower reads
``/v1/events`` raw and counts the chunks it receives and the events in them.

    PYTHONPATH=src python bench/event_writes.py [N]
"""

from __future__ import annotations

import json
import sys
import threading
import time

from hal.bench.e2e import TRUE
from hal.bench.localup import local_cluster
from hal.client.sync import HalClient
from hal.testing import http


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with local_cluster(agents=2, cpus_per_agent=32) as up, HalClient(up.url, up.token) as c:
        after = int(http.get(up.url + "/healthz", timeout=5).json()["revision"])
        counts = {"chunks": 0, "events": 0}
        done = threading.Event()

        def follow() -> None:
            headers = {"Authorization": f"Bearer {up.token}"}
            url = f"{up.url}/v1/events?after={after}"
            with http.stream("GET", url, headers=headers, timeout=None) as r:
                for raw in r.iter_raw():
                    counts["chunks"] += 1
                    counts["events"] += raw.count(b"\nevent: ")
                    if done.is_set():
                        return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        for _ in range(n):
            c.submit(TRUE)
        time.sleep(3)  # the last jobs finish
        done.set()
        c.submit(TRUE)  # one more event wakes the reader so that it sees ``done``
        reader.join(5)
    print(json.dumps({"benchmark": "event-writes", "jobs": n, **counts}))


if __name__ == "__main__":
    main()
