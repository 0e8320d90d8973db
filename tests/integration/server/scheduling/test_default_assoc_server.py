"""A job that names no account or QoS, on a live control plane: like Slurm 22.05.8 with
slurmdbd (docs/slurm-checks.md), it is charged to its user's default account and runs in
QoS ``normal``, and squeue (``%a``/``%q``, ``-O Account,QOS``), ``scontrol show job``,
sacct and REST all show them, where HAL used to show ``(null)`` or nothing.

No ``[[qos]]`` is configured here: ``normal`` is the QoS HAL always has (``sacctmgr show
qos`` lists it), as slurmdbd's always exists. A user without a default account in
``[[users]]`` (carol) keeps no account, as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.priority import priority_from_dict
from hal.testing.live import LiveServer

POLICY = priority_from_dict(
    {
        "accounts": [{"name": "physics"}, {"name": "chem"}],
        "users": [{"name": "alice", "default_account": "physics", "accounts": ["chem"]}],
    }
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("hal"), config_overrides={"priority": POLICY}) as s:
        yield s


@pytest.fixture(scope="module")
def tokens(live: LiveServer) -> dict[str, str]:
    return live.add_users("alice", "carol")


def _held(live: LiveServer, token: str, tmp: Path, *args: str) -> int:
    """A held job (it stays pending: there are no nodes to run it anyway)."""
    out = live.cli("sbatch", "--parsable", "-H", *args, "--wrap", "true", token=token, cwd=tmp)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def _views(live: LiveServer, job_id: int) -> tuple[str, str, str, str]:
    """(squeue -o '%a %q', squeue -O Account,QOS, scontrol's Account=/QOS=, sacct's)."""
    short = live.cli("squeue", "-h", "-j", str(job_id), "-o", "%a %q")
    wide = live.cli("squeue", "-h", "-j", str(job_id), "-O", "Account,QOS")
    show = live.cli("scontrol", "show", "job", str(job_id))
    sacct = live.cli("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "Account,QOS")
    for done in (short, wide, show, sacct):
        assert done.returncode == 0, done.stderr
    fields = [w for w in show.stdout.split() if w.startswith(("Account=", "QOS="))]
    return short.stdout.strip(), wide.stdout.rstrip(), " ".join(fields), sacct.stdout.strip()


def test_a_job_naming_none_gets_the_default_account_and_normal(
    live: LiveServer, tokens: dict[str, str], tmp_path: Path
) -> None:
    job_id = _held(live, tokens["alice"], tmp_path)
    assert _views(live, job_id) == (
        "physics normal",
        f"{'physics':<20}{'normal':<20}".rstrip(),
        "Account=physics QOS=normal",
        "physics|normal",
    )
    with live.client() as c:  # stored with the job: REST shows them too
        info = c.job(job_id)
    assert (info.account, info.qos) == ("physics", "normal")


def test_what_a_job_names_is_kept(live: LiveServer, tokens: dict[str, str], tmp_path: Path) -> None:
    job_id = _held(live, tokens["alice"], tmp_path, "-A", "chem", "--qos", "high")
    assert _views(live, job_id)[0] == "chem high"


def test_a_user_without_a_default_account_keeps_none(
    live: LiveServer, tokens: dict[str, str], tmp_path: Path
) -> None:
    job_id = _held(live, tokens["carol"], tmp_path)
    short, _, show, sacct = _views(live, job_id)
    assert (short, show, sacct) == ("(null) normal", "Account=(null) QOS=normal", "|normal")
