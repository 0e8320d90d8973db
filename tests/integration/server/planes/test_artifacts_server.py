"""The artifact registry on a live server, on SQLite and PostgreSQL (docs/user/artifacts.md):
what `hal artifact` publishes, lists, fetches and removes, what a submission pins, and
what it refuses (with nothing stored)."""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import func, select

from hal.core.errors import Conflict, InvalidRequest, NotFound, PayloadTooLarge, PermissionDenied
from hal.state import schema
from hal.state.artifacts import PIECE
from hal.state.store import SqlStateStore
from hal.testing import http
from hal.testing.live import LiveServer
from hal.wire.jobs import JobSubmit


def _file(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _pieces(live: LiveServer) -> int:
    store = SqlStateStore(live.db_url)
    try:
        with store.engine.connect() as conn:
            return int(
                conn.execute(select(func.count()).select_from(schema.artifact_blobs)).scalar_one()
            )
    finally:
        store.close()


def test_push_list_show_pull_and_remove_with_the_cli(
    each_store: LiveServer, tmp_path: Path
) -> None:
    live = each_store
    content = bytes(range(256)) * (PIECE // 256 + 1000)  # more than one piece
    path = _file(tmp_path, "tool.bin", content)
    sha = hashlib.sha256(content).hexdigest()
    pushed = live.cli("artifact", "push", "tool@1.0", str(path))
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.startswith("published tool@1.0 (4.2M") and sha in pushed.stdout
    again = live.cli("artifact", "push", "tool@1.0", str(path))
    assert again.returncode == 0 and "already published with this content" in again.stdout
    listed = live.cli("artifact", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "VERSION", "SIZE", "PUBLISHED", "OWNER", "SHA256"]
    assert listed[1].split()[:3] == ["tool", "1.0", "4.2M"] and listed[1].endswith(sha[:12])
    shown = json.loads(live.cli("artifact", "show", "tool", "--json").stdout)
    assert (shown["version"], shown["size"], shown["sha256"]) == ("1.0", len(content), sha)
    pulled = live.cli("artifact", "pull", "tool@1.0", "-o", str(tmp_path / "back"))
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "back").read_bytes() == content
    assert _pieces(live) == 2
    removed = live.cli("artifact", "rm", "tool@1.0")
    assert removed.stdout == "removed tool@1.0\n"
    assert _pieces(live) == 0
    gone = live.cli("artifact", "show", "tool@1.0")
    assert gone.returncode != 0 and "no artifact 'tool'" in gone.stderr


def test_versions_never_change_and_refusals_store_nothing(
    each_store: LiveServer, tmp_path: Path
) -> None:
    live = each_store
    with live.client() as c:
        c.push_artifact("tool", "1.0", _file(tmp_path, "a", b"one"))
        with pytest.raises(
            Conflict, match=r"tool@1.0 is published with other content .*publish a new version"
        ):
            c.push_artifact("tool", "1.0", _file(tmp_path, "b", b"two"))
        with pytest.raises(InvalidRequest, match="the artifact is empty"):
            c.push_artifact("tool", "2.0", _file(tmp_path, "c", b""))
        with pytest.raises(InvalidRequest, match="'latest' is not a version one may publish"):
            c.push_artifact("tool", "latest", _file(tmp_path, "d", b"three"))
        assert [a.version for a in c.artifacts("tool")] == ["1.0"]
    # a digest that does not match what arrived: nothing is stored
    r = http.put(
        f"{live.url}/v1/artifacts/tool/3.0",
        content=b"four",
        headers={"Authorization": f"Bearer {live.token}", "X-HAL-SHA256": "0" * 64},
    )
    assert r.status_code == 400 and "changed on the way" in r.json()["detail"]
    assert _pieces(live) == 1


def test_an_artifact_over_the_limit_is_refused_whole(tmp_path: Path) -> None:
    with LiveServer(
        tmp_path / "hal", config_overrides={"max_artifact_bytes": 5 * 1024 * 1024}
    ) as live:
        big = _file(tmp_path, "big", b"x" * (6 * 1024 * 1024))
        with (
            live.client() as c,
            pytest.raises(PayloadTooLarge, match="over this cluster's limit of 5,242,880 bytes"),
        ):
            c.push_artifact("big", "1", big)
        assert _pieces(live) == 0  # the first piece written went with the refusal
        # over the request-size guard (64 MiB by default) is fine: it streams
        with live.client() as c:
            c.push_artifact("small", "1", _file(tmp_path, "small", b"y" * 1000))
            assert [a.name for a in c.artifacts()] == ["small"]


def test_a_name_is_its_publishers(each_store: LiveServer, tmp_path: Path) -> None:
    live = each_store
    with live.client() as c:
        alice = c.add_user("alice").token
        bob = c.add_user("bob").token
    with live.client(alice) as a:
        a.push_artifact("solver", "1", _file(tmp_path, "s1", b"v1"))
    with live.client(bob) as b:
        with pytest.raises(PermissionDenied, match="artifact 'solver' is alice's"):
            b.push_artifact("solver", "2", _file(tmp_path, "s2", b"v2"))
        with pytest.raises(PermissionDenied):
            b.remove_artifact("solver", "1")
        assert b.artifact("solver").owner == "alice"  # anyone may read
    with live.client() as admin:
        admin.push_artifact("solver", "2", _file(tmp_path, "s3", b"v3"))  # an administrator may


def test_a_submission_pins_the_version_it_named(each_store: LiveServer, tmp_path: Path) -> None:
    live = each_store
    script = "#!/bin/sh\ntrue\n"
    with live.client() as c:
        first, _ = c.push_artifact("lib", "1.0", _file(tmp_path, "l1", b"first"))
        with pytest.raises(
            NotFound, match=r"artifact .lib. has no version .9.; it has 1\.0"
        ) as err:
            c.submit(JobSubmit(script=script, workdir=str(tmp_path), artifacts=["lib@9"]))
        assert err.value.field == "artifacts"
        with pytest.raises(NotFound, match=r"no artifact 'nope': publish it first"):
            c.submit(JobSubmit(script=script, workdir=str(tmp_path), artifacts=["nope"]))
        assert c.jobs() == []  # nothing was queued
        held = JobSubmit(script=script, workdir=str(tmp_path), artifacts=["lib"], hold=True)
        job = c.submit(held).job_id
        time.sleep(0.01)
        c.push_artifact("lib", "2.0", _file(tmp_path, "l2", b"second"))
        assert c.job(job).artifacts == ["lib@1.0"]  # "latest" then, whatever comes later
        with pytest.raises(
            Conflict, match=rf"lib@1.0 is pinned by jobs that have not ended \({job}\)"
        ):
            c.remove_artifact("lib", "1.0")
        c.cancel(str(job))
        assert c.remove_artifact("lib", "1.0").sha256 == first.sha256
    # the job's record keeps what it pinned, and `scontrol show job` says so
    shown = live.cli("scontrol", "show", "job", str(job)).stdout
    assert "Artifacts=lib@1.0" in shown


def test_the_registry_outlives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "hal"
    with LiveServer(data) as live:
        with live.client() as c:
            c.push_artifact("tool", "1.0", _file(tmp_path, "t", b"kept"))
        token = live.token
    restarted = LiveServer(data)
    restarted.token = token
    with restarted, restarted.client() as c:
        (found,) = c.artifacts()
        assert (found.name, found.version, found.size) == ("tool", "1.0", 4)
        c.pull_artifact("tool", "1.0", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == b"kept"


def test_two_pushes_of_one_new_version_at_once_both_succeed(tmp_path: Path) -> None:
    """(One of them was a 500: the database refused the second row.)"""
    with LiveServer(tmp_path / "hal") as live:
        path = _file(tmp_path, "p", b"same" * 100_000)
        with ThreadPoolExecutor(4) as pool:
            done = list(
                pool.map(lambda _: live.cli("artifact", "push", "race@1", str(path)), range(4))
            )
        assert [d.returncode for d in done] == [0, 0, 0, 0], [d.stderr for d in done]
        assert sum(d.stdout.startswith("published") for d in done) == 1
        assert _pieces(live) == 1


def test_a_name_stays_its_publishers_once_emptied_and_latest_is_no_version(
    tmp_path: Path,
) -> None:
    with LiveServer(tmp_path / "hal") as live:
        with live.client() as c:
            alice, bob = c.add_user("alice").token, c.add_user("bob").token
        with live.client(alice) as a:
            a.push_artifact("mine", "1", _file(tmp_path, "m", b"v1"))
            a.remove_artifact("mine", "1")
        with live.client(bob) as b, pytest.raises(PermissionDenied, match="'mine' is alice's"):
            b.push_artifact("mine", "2", _file(tmp_path, "m2", b"v2"))
        with live.client() as c:
            c.push_artifact("x", "1", _file(tmp_path, "x", b"x"))
            with pytest.raises(InvalidRequest, match="'latest' is not a version one may publish"):
                c.push_artifact("x", "LATEST", _file(tmp_path, "y", b"y"))
        refused = live.cli("artifact", "rm", "x@latest")
        assert refused.returncode != 0 and "give the version itself: x@VERSION" in refused.stderr
        r = http.delete(
            f"{live.url}/v1/artifacts/x/latest", headers={"Authorization": f"Bearer {live.token}"}
        )
        assert r.status_code == 400 and "name the version to remove" in r.json()["detail"]


def test_kinds_pull_and_requeue_after_removal(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "hal") as live:
        app = _file(tmp_path, "app.pyz", b"PK\x03\x04 a zipapp, as far as a sniff goes")
        tarball = tmp_path / "t.tgz"
        with tarfile.open(tarball, "w:gz") as t:
            t.add(app, "app.pyz")
        with live.client() as c:
            assert c.push_artifact("app", "1", app)[0].kind == "program"  # by its suffix
            assert c.push_artifact("bundle", "1", tarball)[0].kind == "archive"
            assert c.push_artifact("forced", "1", tarball, "program")[0].kind == "program"
        # REST without a kind: the server looks at the first bytes
        headers = {"Authorization": f"Bearer {live.token}"}
        r = http.put(
            f"{live.url}/v1/artifacts/sniffed/1", content=tarball.read_bytes(), headers=headers
        )
        assert r.status_code == 201 and r.json()["kind"] == "archive"
        assert "Kind=program" in live.cli("artifact", "show", "app").stdout
        # pull: into a folder, made executable for a program; a missing folder is refused
        (tmp_path / "into").mkdir()
        done = live.cli("artifact", "pull", "app", "-o", str(tmp_path / "into"))
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "into" / "app-1").stat().st_mode & 0o111
        missing = live.cli("artifact", "pull", "app", "-o", str(tmp_path / "nowhere" / "x"))
        assert missing.returncode != 0 and "does not exist" in missing.stderr
        assert sorted(p.name for p in (tmp_path / "into").iterdir()) == ["app-1"]
        # an archive pulled under its own name gets the suffix its content says, so that
        # tar takes it; a name given with -o is kept as it is
        done = live.cli("artifact", "pull", "bundle", "-o", str(tmp_path / "into") + "/")
        assert done.stdout.startswith(str(tmp_path / "into" / "bundle-1.tar.gz")), done.stdout
        with tarfile.open(tmp_path / "into" / "bundle-1.tar.gz") as back:
            assert back.getnames() == ["app.pyz"]
        live.cli("artifact", "pull", "bundle", "-o", str(tmp_path / "mine"))
        assert (tmp_path / "mine").read_bytes() == tarball.read_bytes()
        # a job that ended, its version removed since: requeuing it is refused
        with live.client() as c:
            job = c.submit(
                JobSubmit(
                    script="#!/bin/sh\ntrue\n",
                    workdir=str(tmp_path),
                    artifacts=["app@1"],
                    hold=True,
                )
            ).job_id
            c.cancel(str(job))
            c.remove_artifact("app", "1")
            with pytest.raises(
                Conflict, match=rf"job {job} pins app@1, which has been removed since"
            ):
                c.requeue(job)


def _metrics(live: LiveServer) -> dict[str, float]:
    """The ``hal_artifact_*`` samples of ``/metrics``: name{labels} → value."""
    from prometheus_client.parser import text_string_to_metric_families

    text = http.get(f"{live.url}/metrics", timeout=10).text
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("hal_artifact_")
    }


def test_the_registry_is_measured_in_metrics(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "hal") as live, live.client() as c:
        assert _metrics(live)["hal_artifact_versions"] == 0
        c.push_artifact("tool", "1.0", _file(tmp_path, "a", b"x" * 1000))
        c.push_artifact("tool", "1.1", _file(tmp_path, "b", b"x" * 1000))  # the same content
        c.push_artifact("other", "1", _file(tmp_path, "c", b"y" * 10))
        c.push_artifact("other", "1", _file(tmp_path, "c", b"y" * 10))  # no change
        c.pull_artifact("tool", "1.0", tmp_path / "back")
        c.pull_artifact("tool", "1.1", tmp_path / "back")
        got = _metrics(live)
        assert got["hal_artifact_versions"] == 3 and got["hal_artifact_names"] == 2
        assert got["hal_artifact_stored_bytes"] == 1010  # the shared content once
        assert got["hal_artifact_published_total"] == 3
        assert got["hal_artifact_downloads_total{to=user}"] == 2
        assert got["hal_artifact_served_bytes_total{to=user}"] == 2000
        assert got["hal_artifact_downloads_total{to=agent}"] == 0
        c.remove_artifact("other", "1")
        assert _metrics(live)["hal_artifact_stored_bytes"] == 1000
