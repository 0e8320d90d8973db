"""Artifact aliases, canaries and rollbacks, the nodes' inventory and pre-staging, on a
real server and real agents (docs/user/artifacts.md): ``NAME@stable`` pins the version
it names at submission; a canary gives its share of the jobs (by job id) the new
version; a canary whose program exits 1 is rolled back by itself with the evidence in an
event; ``hal artifact nodes`` shows what each node holds within ``[artifacts]
node_cache``; and a job reserved on a busy node finds its artifact there, and its Python
environment built, before it starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.config.artifacts import ArtifactsConfig
from hal.core.errors import HalError
from hal.core.pyenv import make_python_env
from hal.state.rollout import canary_pick
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.testing.wheels import make_wheel

NODE_CACHE = 64 * 1024 * 1024
MIN_JOBS = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = ArtifactsConfig(node_cache_bytes=NODE_CACHE, canary_min_jobs=MIN_JOBS)
    tmp = tmp_path_factory.mktemp("hal")
    make_wheel(tmp / "wheels", "halpkgb", "1.0")  # the nodes' package index: a folder
    index = {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(tmp / "wheels")}
    with LiveServer(tmp, config_overrides={"artifacts": settings}) as live:
        for name in ("node1", "node2"):
            live.start_agent(name, cpus=2, env=index)
        with live.client() as c:
            wait_until(
                lambda: {"node1", "node2"} <= {n.name for n in c.nodes() if n.state == "UP"},
                message="agents to register",
            )
        yield live


def _program(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    return path


def _publish(live: LiveServer, folder: Path, name: str, bodies: dict[str, str]) -> dict[str, str]:
    """Publish each version's program; version → sha256."""
    with live.client() as c:
        return {
            version: c.push_artifact(name, version, _program(folder, f"{name}{version}", body))[
                0
            ].sha256
            for version, body in bodies.items()
        }


def _hal(live: LiveServer, *args: str, cwd: Path | None = None) -> str:
    done = live.cli(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ended(live: LiveServer, job_ids: list[str]) -> dict[str, str]:
    with live.client() as c:
        wait_until(
            lambda: all(c.job(j).state not in ("PENDING", "RUNNING") for j in job_ids),
            120,
            message="jobs to end",
        )
        return {j: c.job(j).state for j in job_ids}


def test_an_alias_pins_the_version_it_names_and_moves_back(
    server: LiveServer, tmp_path: Path
) -> None:
    shas = _publish(server, tmp_path, "app", {"1": "echo app 1", "2": "echo app 2"})
    said = _hal(server, "artifact", "promote", "app@1", "--to", "stable")
    assert said.strip() == f"app@stable is 1 (sha256 {shas['1']})"
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --artifact=app@stable\napp\n")
    job = _hal(server, "sbatch", "--parsable", "-o", "out.txt", "job.sh", cwd=tmp_path).strip()
    _hal(server, "artifact", "promote", "app@2", "--to", "stable")  # after: no change to it
    assert _ended(server, [job]) == {job: "COMPLETED"}
    assert (tmp_path / "out.txt").read_text() == "app 1\n"
    shown = _hal(server, "scontrol", "show", "job", job)
    assert "Artifacts=app@1" in shown
    assert "ArtifactAliases=app@stable=1" in shown
    assert f"ArtifactDigests=app@1={shas['1']}" in shown
    with server.client() as c:
        assert c.job(job).artifact_aliases == ["app@stable=1"]
        assert [a.version for a in c.artifact_aliases("app")] == ["2"]
        assert c.artifact_aliases("app")[0].history == ["1"]
    back = _hal(server, "artifact", "rollback", "app")
    assert back.strip() == f"app@stable is 1 (sha256 {shas['1']}), no canary"
    again = server.cli("artifact", "rollback", "app")
    assert again.returncode != 0
    assert "named no other version before 1" in again.stderr
    assert "hal artifact promote app@VERSION --to stable" in again.stderr
    removed = server.cli("artifact", "rm", "app@1")  # what stable names stays
    assert removed.returncode != 0 and "alias(es) stable" in removed.stderr


def test_bad_aliases_and_shares_are_refused_saying_what_to_do(
    server: LiveServer, tmp_path: Path
) -> None:
    _publish(server, tmp_path, "lib", {"1": "true", "2": "true"})
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    named = server.cli("sbatch", "--artifact=lib@beta", "job.sh", cwd=tmp_path)
    assert named.returncode != 0
    assert "no version 'beta'" in named.stderr
    assert "hal artifact promote lib@VERSION --to beta" in named.stderr
    fresh = server.cli("artifact", "promote", "lib@2", "--to", "beta", "--canary", "10%")
    assert fresh.returncode != 0 and "lib@beta names no version yet" in fresh.stderr
    _hal(server, "artifact", "promote", "lib@1", "--to", "stable")
    for share in ("150%", "0", "-3%", "lots"):
        bad = server.cli("artifact", "promote", "lib@2", "--to", "stable", f"--canary={share}")
        assert bad.returncode != 0, share
        assert "between 0 and 100 %" in bad.stderr, bad.stderr
    same = server.cli("artifact", "promote", "lib@1", "--to", "stable", "--canary", "10%")
    assert same.returncode != 0 and "already names 1" in same.stderr
    clash = server.cli("artifact", "promote", "lib@1", "--to", "2")
    assert clash.returncode != 0 and "lib@2 is a published version" in clash.stderr
    with server.client() as c, pytest.raises(HalError, match="lib@stable is an alias"):
        c.push_artifact("lib", "stable", _program(tmp_path, "lib-s", "true"))


def test_a_failing_canary_is_rolled_back_with_the_evidence(
    server: LiveServer, tmp_path: Path
) -> None:
    shas = _publish(
        server,
        tmp_path,
        "tool",
        {"1": "echo tool 1", "2": "echo tool 2; exit 1", "3": "echo tool 3"},
    )
    _hal(server, "artifact", "promote", "tool@1", "--to", "stable")
    said = _hal(server, "artifact", "promote", "tool@2", "--to", "stable", "--canary", "50%")
    assert said.strip() == "tool@stable: canary 2 for 50% of the jobs naming it, 1 for the others"
    with server.client() as c:
        after = max((e.id for e in c.events(follow=False)), default=0)
    (tmp_path / "job.sh").write_text("#!/bin/sh\n#SBATCH --artifact=tool@stable\ntool\n")
    array = _hal(
        server, "sbatch", "--parsable", "--array=1-24", "-o", "/dev/null", "job.sh", cwd=tmp_path
    ).strip()
    with server.client() as c:
        ids = [str(j.id) for j in c.jobs(include_finished=True) if j.array_job_id == int(array)]
    assert len(ids) == 24
    states = _ended(server, ids)
    got: dict[str, list[str]] = {"1": [], "2": []}
    with server.client() as c:
        for job_id in ids:
            info = c.job(job_id)
            version = info.artifacts[0].removeprefix("tool@")
            # the share, by a hash of the job's id: the same for every element it gave
            assert (version == "2") == canary_pick("tool", "stable", int(job_id), 50.0)
            assert info.artifact_aliases == [f"tool@stable={version}"]
            assert info.artifact_digests == [f"tool@{version}={shas[version]}"]
            got[version].append(states[job_id])
    assert len(got["1"]) >= MIN_JOBS and len(got["2"]) >= MIN_JOBS
    assert set(got["1"]) == {"COMPLETED"} and set(got["2"]) == {"FAILED"}
    with server.client() as c:
        wait_until(lambda: not c.artifact_aliases("tool")[0].canary, message="the rollback")
        alias = c.artifact_aliases("tool")[0]
        assert (alias.version, alias.canary) == ("1", "")
        assert alias.rolled_back["from"] == "2" and alias.rolled_back["automatic"] is True
        events = [e for e in c.events(after, follow=False) if e.kind == "artifact.rolled_back"]
    assert len(events) == 1
    evidence = events[0].data
    assert (evidence["from"], evidence["to"], evidence["by"]) == ("2", "1", "hal")
    assert evidence["canary_failed"] == evidence["canary_jobs"]
    assert int(str(evidence["canary_jobs"])) >= MIN_JOBS
    assert evidence["previous_failed"] == 0 and int(str(evidence["previous_jobs"])) >= MIN_JOBS
    assert evidence["canary_rate"] == 1.0 and evidence["previous_rate"] == 0.0
    assert 0 < float(str(evidence["p_value"])) < 0.01
    shown = _hal(server, "artifact", "aliases", "tool")
    assert "rolled back 2" in shown and "p=" in shown
    metrics = http.get(f"{server.url}/metrics", timeout=10).text
    assert 'hal_artifact_rollbacks_total{how="automatic"} 1.0' in metrics
    # a job naming the alias now gets the version it names
    (tmp_path / "one.sh").write_text("#!/bin/sh\n#SBATCH --artifact=tool@stable\ntool\n")
    one = _hal(server, "sbatch", "--parsable", "-o", "one.txt", "one.sh", cwd=tmp_path).strip()
    assert _ended(server, [one]) == {one: "COMPLETED"}
    assert (tmp_path / "one.txt").read_text() == "tool 1\n"
    # a good canary, then promoted without --canary: the rollout is complete
    _hal(server, "artifact", "promote", "tool@3", "--to", "stable", "--canary", "30%")
    _hal(server, "artifact", "promote", "tool@3", "--to", "stable")
    with server.client() as c:
        alias = c.artifact_aliases("tool")[0]
    assert (alias.version, alias.canary, alias.history[-1]) == ("3", "", "1")


def test_the_nodes_report_what_they_hold_within_the_configured_bound(
    server: LiveServer, tmp_path: Path
) -> None:
    shas = _publish(server, tmp_path, "inv", {"1": "echo inv"})
    other = _publish(server, tmp_path, "other", {"1": "echo other"})["1"]
    (tmp_path / "job.sh").write_text("#!/bin/sh\ninv\nother\n")
    jobs = [
        _hal(
            server,
            "sbatch",
            "--parsable",
            "-w",
            node,
            "--artifact=inv@1,other@1",
            "-o",
            "/dev/null",
            "job.sh",
            cwd=tmp_path,
        ).strip()
        for node in ("node1", "node2")
    ]
    assert set(_ended(server, jobs).values()) == {"COMPLETED"}

    def holders() -> set[str]:
        with server.client() as c:
            return {n.node for n in c.artifact_nodes("inv") for p in n.copies if p.versions}

    wait_until(lambda: holders() == {"node1", "node2"}, 60, message="the inventory")
    with server.client() as c:
        nodes = c.artifact_nodes("inv")
        everything = c.artifact_nodes()
    for n in nodes:
        assert n.limit_bytes == NODE_CACHE  # [artifacts] node_cache, over --artifact-cache
        (copy,) = n.copies
        assert (copy.sha256, copy.kind, copy.versions) == (shas["1"], "program", ["inv@1"])
        assert copy.size == len("#!/bin/sh\necho inv\n")
    assert all(n.used_bytes >= n.copies[0].size for n in nodes)
    for n in everything:  # without a name: every name's copies
        assert (other, ["other@1"]) in [(p.sha256, p.versions) for p in n.copies]
    shown = _hal(server, "artifact", "nodes", "inv")
    assert "node1:" in shown and "node2:" in shown and "inv@1" in shown
    assert "of 64.0M" in shown


def test_a_job_reserved_on_a_busy_node_finds_its_software_there_first(
    server: LiveServer, tmp_path: Path
) -> None:
    shas = _publish(server, tmp_path, "pre", {"1": "echo pre"})
    lock = "halpkgb==1.0\n"
    (tmp_path / "requirements.txt").write_text(lock)
    env = make_python_env({"requirements.txt": lock}).sha256
    cache = server.data_dir / "agents" / "node2" / "artifacts"
    (tmp_path / "busy.sh").write_text("#!/bin/sh\nsleep 300\n")
    (tmp_path / "job.sh").write_text(
        '#!/bin/sh\npre\npython -c "import halpkgb; print(halpkgb.VERSION)"\n'
    )
    busy = _hal(server, "sbatch", "--parsable", "-w", "node2", "-n2", "-t", "10",
                "-o", "/dev/null", "busy.sh", cwd=tmp_path).strip()  # fmt: skip
    try:
        with server.client() as c:
            wait_until(lambda: c.job(busy).state == "RUNNING", 60, message="the busy job")
        job = _hal(server, "sbatch", "--parsable", "-w", "node2", "-n2", "-t", "5",
                   "--artifact=pre@1", "--python-env=requirements.txt", "-o", "out.txt",
                   "job.sh", cwd=tmp_path).strip()  # fmt: skip
        for copy in (f"{shas['1']}.program", f"{env}.venv"):
            wait_until((cache / copy / "ready").exists, 120, message=f"{copy} on node2")
        with server.client() as c:
            assert c.job(job).state == "PENDING"  # fetched and built before it could start
    finally:
        server.cli("scancel", busy)
    assert _ended(server, [job]) == {job: "COMPLETED"}
    assert (tmp_path / "out.txt").read_text() == "pre\n1.0\n"

    def builds() -> list[tuple[str, list[str]]]:  # node2's environments, in the inventory
        with server.client() as c:
            found = [n for n in c.artifact_nodes() if n.node == "node2"]
        return [(p.sha256, p.versions) for n in found for p in n.copies if p.kind == "python-env"]

    wait_until(lambda: (env, []) in builds(), 90, message="the build in the inventory")
