"""sinfo, seff, sstat, sprio and sshare read the server's answers as records
(``HalClient``'s ``validate=False``); what they print is what they printed from the wire
models, byte for byte: each command runs twice on the same answers, once handed the
models whatever it asks (the path before records) and once the records of their JSON."""

from __future__ import annotations

from typing import Any

import pytest
import test_fairtree_sshare
import test_sinfo
import test_sinfo_all_fields
import test_sinfo_long_format
import test_sprio_sshare
import test_sshare_format
import test_sstat
from compat_fakes import FakeClient, Result, answered, call, job_shapes, running

from hal.compat.sstat import FIELDS
from hal.wire.jobs import GpuUsage


class Models:
    """A fake client whose every answer is the wire models, ``validate`` or not."""

    def __init__(self, inner: FakeClient) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def validated(*args: Any, validate: bool = True, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return validated if callable(method) else method


def _seff_jobs() -> FakeClient:
    gpu = GpuUsage(mem_bytes=1 << 30, max_mem_bytes=2 << 30, util=50, max_util=90, ave_util=40.5)
    sampled = running(60, cpus=4, node_count=2, nodes=["n1", "n2"], gpu_usage=gpu)
    return FakeClient(job_list=[*job_shapes(), sampled])


class FixedPriority(test_sprio_sshare.PrioClient):
    """Job 7's priority set by an administrator (``fixed``): sprio prints its factors 0."""

    def priorities(self, *, validate: bool = True, **query: Any) -> Any:
        found = super().priorities(**query)
        fixed = found.jobs[0].model_copy(update={"fixed": True, "priority": 99, "nice": 5})
        listed = found.model_copy(update={"jobs": [fixed, *found.jobs[1:]]})
        return answered(listed, validate=validate)


SINFO = [
    [],
    ["-N"],
    ["-l"],
    ["-N", "-l"],
    ["-s"],
    ["-R"],
    ["-R", "-l"],
    ["-e"],
    ["-o", "%all"],
    ["-O", "All"],
    ["-N", "-O", "NodeList,StateLong:10,FreeMem,CPUsLoad,Gres,GresUsed,Features"],
    ["-S", "-N,P", "-o", "%N %P %t %c %m %E %u %H %z"],
    ["-t", "idle,drain", "-N"],
]
CASES = [
    *[(client, "sinfo", argv) for argv in SINFO for client in ("sinfo", "all", "long")],
    *[("seff", "seff", [str(j.display_id)]) for j in _seff_jobs().job_list],
    ("sstat", "sstat", ["-a", "-j", "5,6", "-o", ",".join(t for t, _, _ in FIELDS.values())]),
    ("sstat", "sstat", ["-P", "-j", "5.2,5.3"]),
    ("prio", "sprio", []),
    ("prio", "sprio", ["-l"]),
    ("prio", "sprio", ["-n", "-l"]),
    ("prio", "sprio", ["-w"]),
    ("fixed", "sprio", ["-l"]),
    ("fixed", "sprio", ["-n", "-l"]),
    ("prio", "sshare", ["-a", "-l"]),
    ("fairtree", "sshare", ["-a", "-l", "-P"]),
    ("share_format", "sshare", ["-a", "-o", "Account,User%12,TRESRunMins%60"]),
]
CLIENTS = {
    "sinfo": test_sinfo.cluster,
    "all": test_sinfo_all_fields.cluster,
    "long": test_sinfo_long_format.cluster,
    "seff": _seff_jobs,
    "sstat": test_sstat._with_steps,
    "prio": test_sprio_sshare.PrioClient,
    "fixed": FixedPriority,
    "fairtree": test_fairtree_sshare.ShareClient,
    "share_format": test_sshare_format.ShareClient,
}


@pytest.mark.parametrize(("client", "command", "argv"), CASES)
def test_records_print_what_the_models_printed(client: str, command: str, argv: list[str]) -> None:
    models = call(Models(CLIENTS[client]()), command, *argv)  # type: ignore[arg-type]
    records = call(CLIENTS[client](), command, *argv)
    assert records == models
    assert records.rc == 0 and records.out, records.err


def test_a_fixed_priority_lists_its_factors_0() -> None:
    line = call(FixedPriority(), "sprio", "-l", "-h").lines[0].split()
    assert line[:4] == ["7", "debug", "alice", "99"]
    assert set(line[4:-1]) == {"0"}  # SITE ... NICE, the TRES (null)


def test_a_record_and_a_model_printing_apart_would_be_seen() -> None:
    """The comparison itself: a client whose models differ from its records is told."""

    class Apart(FakeClient):
        def nodes(self, *, validate: bool = True) -> Any:
            listed = super().nodes(validate=validate)
            return listed if validate else listed[:1]

    two = test_sinfo.cluster()
    apart = Apart(node_list=two.node_list, partition_list=two.partition_list)
    models: Result = call(Models(apart), "sinfo", "-N")  # type: ignore[arg-type]
    assert call(apart, "sinfo", "-N") != models
