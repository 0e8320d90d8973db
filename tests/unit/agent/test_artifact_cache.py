"""The node's copies of artifacts (hal.agent.artifacts.ArtifactCache), on real files:
archives unpacked read-only (one top folder as the root), single programs behind
``bin/NAME``, the job's environment (``HAL_ARTIFACT_<NAME>``, ``PATH``), archives that
reach outside refused, digests checked, one download per node, retries, and eviction of
the least recently deployed copies no live job holds. The server is an in-process
``ArtifactChannel`` serving bytes by SHA-256."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

import hal.agent.artifacts
from hal.agent.artifacts import HOLDS, ArtifactCache, ArtifactError, ArtifactMissing
from hal.core.artifacts import kind_of_content
from hal.slurm.job_variables import DEFAULT_PATH
from hal.wire.agent import ArtifactPin

TOOL = b"#!/bin/sh\necho tool 1.0 says $1\n"
PLAIN = b"#!/bin/sh\necho plain program\n"
BASE_PATH = "/usr/bin:/bin"


class Channel:
    """Serves content by digest; the first ``fail`` calls write half and then break."""

    def __init__(self, contents: dict[str, bytes], fail: int = 0, missing: bool = False) -> None:
        self.contents = contents
        self.fail = fail
        self.missing = missing
        self.calls = 0

    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        self.calls += 1
        if self.missing:
            raise ArtifactMissing(f"no artifact {sha256}")
        data = self.contents[sha256]
        await asyncio.sleep(0)  # (deploys running at once meet here)
        write(data[: len(data) // 2])
        if self.calls <= self.fail:
            raise ConnectionError("connection reset")
        write(data[len(data) // 2 :])


def copies(root: Path) -> list[str]:
    """What ``root`` holds besides the record of which jobs hold which copies."""
    return sorted(p.name for p in root.iterdir() if p.name != HOLDS)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pin(name: str, data: bytes, kind: str | None = None) -> ArtifactPin:
    """As the server pins it: an archive where its first bytes say so, else a program."""
    kind = kind or kind_of_content(data[:512])
    return ArtifactPin(name=name, version="1.0", sha256=sha(data), kind=kind)


def tar_of(members: dict[str, bytes], gz: bool = False) -> bytes:
    """A tar archive (gzipped or not) of executable files (``name → content``)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


def zip_of(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A zip archive (``name → (content, Unix mode)``)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, (content, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, content)
    return out.getvalue()


def cache_of(
    tmp_path: Path,
    channel: Channel | None,
    limit_bytes: int = 10**9,
    live: Callable[[], Iterable[int]] = lambda: {1, 2, 3},
) -> ArtifactCache:
    return ArtifactCache(tmp_path / "artifacts", channel, limit_bytes, live)


def deploy(cache: ArtifactCache, job_id: int, *pins: ArtifactPin) -> dict[str, str]:
    return asyncio.run(cache.deploy(job_id, pins, {"PATH": BASE_PATH, "HOME": "/home/u"}))


def writable(top: Path) -> list[Path]:
    """Files and folders under ``top`` (itself included) with a write bit."""
    return [p for p in [top, *top.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o222]


def run(command: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [command, "hi"], env=env, capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hal.agent.artifacts, "RETRY_SECONDS", 0)


# -- archives -----------------------------------------------------------------------------


def test_a_tar_gz_with_one_top_folder(tmp_path: Path) -> None:
    data = tar_of({"tool-1.0/bin/tool": TOOL, "tool-1.0/README": b"read me"}, gz=True)
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    env = deploy(cache, 1, pin("tool", data))
    place = tmp_path / "artifacts" / sha(data)
    root = place / "tree" / "tool-1.0"
    assert env["HAL_ARTIFACT_TOOL"] == str(root)
    assert env["PATH"] == f"{root}/bin:{BASE_PATH}"
    assert env["HOME"] == "/home/u"
    assert run("tool", env) == "tool 1.0 says hi\n"
    assert writable(place) == []
    assert stat.S_IMODE((root / "bin" / "tool").stat().st_mode) == 0o555
    assert stat.S_IMODE((root / "README").stat().st_mode) == 0o555  # (packed 0755)
    assert (place / "ready").read_text() == str(len(TOOL) + len(b"read me"))
    assert (cache.fetches, cache.fetched_bytes) == (1, len(data))


def test_a_tar_with_two_top_entries_has_the_tree_as_root(tmp_path: Path) -> None:
    data = tar_of({"bin/tool": TOOL, "lib/data": b"x"})
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("tool", data))
    root = tmp_path / "artifacts" / sha(data) / "tree"
    assert env["HAL_ARTIFACT_TOOL"] == str(root)
    assert env["PATH"] == f"{root}/bin:{BASE_PATH}"
    assert run("tool", env) == "tool 1.0 says hi\n"


def test_an_archive_without_bin_adds_nothing_to_path(tmp_path: Path) -> None:
    data = tar_of({"data/a.txt": b"a"})
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("data", data))
    assert env["HAL_ARTIFACT_DATA"] == str(tmp_path / "artifacts" / sha(data) / "tree" / "data")
    assert env["PATH"] == BASE_PATH


def test_a_zip_keeps_its_exec_bits(tmp_path: Path) -> None:
    data = zip_of({"pkg/bin/tool": (TOOL, 0o755), "pkg/notes.txt": (b"notes", 0o644)})
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("pkg", data))
    root = tmp_path / "artifacts" / sha(data) / "tree" / "pkg"
    assert env["HAL_ARTIFACT_PKG"] == str(root)
    assert env["PATH"].split(":")[0] == str(root / "bin")
    assert stat.S_IMODE((root / "bin" / "tool").stat().st_mode) == 0o555
    assert stat.S_IMODE((root / "notes.txt").stat().st_mode) & 0o333 == 0  # no x, no w
    assert run("tool", env) == "tool 1.0 says hi\n"
    assert writable(tmp_path / "artifacts" / sha(data)) == []


@pytest.mark.parametrize("evil", ["../evil", "../../../evil"])
def test_a_zip_reaching_outside_is_refused(tmp_path: Path, evil: str) -> None:
    data = zip_of({"ok.txt": (b"ok", 0o644), evil: (b"gotcha", 0o755)})
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    with pytest.raises(ArtifactError, match="outside the archive"):
        deploy(cache, 1, pin("evil", data))
    assert copies(tmp_path / "artifacts") == []  # no half-made copy, no .part
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts"]
    assert cache.fetches == 0


@pytest.mark.parametrize(
    "member", [tarfile.TarInfo("../escape"), tarfile.TarInfo("a/../../../escape")]
)
def test_a_tar_reaching_outside_is_refused(tmp_path: Path, member: tarfile.TarInfo) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        archive.addfile(tarfile.TarInfo("ok.txt"), io.BytesIO(b""))
        member.size = 6
        archive.addfile(member, io.BytesIO(b"gotcha"))
    data = out.getvalue()
    with pytest.raises(ArtifactError, match="cannot unpack it"):
        deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("x", data))
    assert copies(tmp_path / "artifacts") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts"]


def test_a_tar_linking_outside_is_refused(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        link = tarfile.TarInfo("top/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    data = out.getvalue()
    with pytest.raises(ArtifactError, match="cannot unpack it"):
        deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("x", data))
    assert copies(tmp_path / "artifacts") == []


def test_a_tar_member_with_an_absolute_path_stays_inside(tmp_path: Path) -> None:
    """tarfile's data filter strips the leading / (it refuses only what still reaches
    outside): the member lands in the copy's tree."""
    data = tar_of({"/abs/bin/tool": TOOL})
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("tool", data))
    root = tmp_path / "artifacts" / sha(data) / "tree" / "abs"
    assert env["HAL_ARTIFACT_TOOL"] == str(root)
    assert (root / "bin" / "tool").read_bytes() == TOOL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts"]


# -- single programs ----------------------------------------------------------------------


def test_a_plain_program_is_linked_by_its_name(tmp_path: Path) -> None:
    env = deploy(cache_of(tmp_path, Channel({sha(PLAIN): PLAIN})), 1, pin("hello", PLAIN))
    place = tmp_path / "artifacts" / f"{sha(PLAIN)}.program"
    assert env["HAL_ARTIFACT_HELLO"] == str(place / "file")
    assert env["PATH"] == f"{place}/by-name/hello:{BASE_PATH}"
    assert os.readlink(place / "by-name" / "hello" / "hello") == "../../file"
    assert stat.S_IMODE((place / "file").stat().st_mode) == 0o555
    assert writable(place) == []
    assert run("hello", env) == "plain program\n"


def test_names_of_one_content_each_get_their_own_folder(tmp_path: Path) -> None:
    """A job naming one of them has that name on PATH, not the others."""
    channel = Channel({sha(PLAIN): PLAIN})
    cache = cache_of(tmp_path, channel)
    env = deploy(cache, 1, pin("one", PLAIN), pin("two", PLAIN))
    later = deploy(cache, 2, pin("three", PLAIN))
    place = tmp_path / "artifacts" / f"{sha(PLAIN)}.program"
    assert sorted(p.name for p in (place / "by-name").iterdir()) == ["one", "three", "two"]
    assert env["HAL_ARTIFACT_ONE"] == env["HAL_ARTIFACT_TWO"] == str(place / "file")
    assert run("one", env) == run("two", env) == run("three", later) == "plain program\n"
    assert "by-name/one" not in later["PATH"]
    assert channel.calls == 1


def test_the_same_bytes_as_an_archive_and_as_a_program_are_two_copies(tmp_path: Path) -> None:
    data = tar_of({"bin/tool": TOOL})
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    env = deploy(cache, 1, pin("unpacked", data, "archive"), pin("kept", data, "program"))
    root = tmp_path / "artifacts"
    assert env["HAL_ARTIFACT_UNPACKED"] == str(root / sha(data) / "tree")  # (its top is bin)
    assert env["HAL_ARTIFACT_KEPT"] == str(root / f"{sha(data)}.program" / "file")
    assert run("tool", env) == "tool 1.0 says hi\n"


# -- digests, sharing, retries ------------------------------------------------------------


def test_content_not_matching_its_digest_is_refused(tmp_path: Path) -> None:
    wanted = sha(PLAIN)
    channel = Channel({wanted: b"something else"})
    with pytest.raises(ArtifactError) as caught:
        deploy(cache_of(tmp_path, channel), 1, pin("hello", PLAIN))
    assert f"sha256 {sha(b'something else')}" in str(caught.value)
    assert copies(tmp_path / "artifacts") == []


def test_deploys_at_once_share_one_download(tmp_path: Path) -> None:
    channel = Channel({sha(PLAIN): PLAIN})
    cache = cache_of(tmp_path, channel)

    async def both() -> tuple[dict[str, str], dict[str, str]]:
        return await asyncio.gather(
            cache.deploy(1, [pin("hello", PLAIN)], {}),
            cache.deploy(2, [pin("hello", PLAIN)], {}),
        )

    first, second = asyncio.run(both())
    assert first == second
    assert channel.calls == 1
    deploy(cache, 3, pin("hello", PLAIN))
    assert channel.calls == 1
    assert cache.fetches == 1


def test_transient_failures_are_retried(tmp_path: Path) -> None:
    channel = Channel({sha(PLAIN): PLAIN}, fail=2)
    env = deploy(cache_of(tmp_path, channel), 1, pin("hello", PLAIN))
    assert channel.calls == 3
    assert run("hello", env) == "plain program\n"  # (not the halves of failed tries)
    assert (tmp_path / "artifacts" / f"{sha(PLAIN)}.program" / "file").read_bytes() == PLAIN


def test_failing_every_try_fails_the_deploy(tmp_path: Path) -> None:
    channel = Channel({sha(PLAIN): PLAIN}, fail=3)
    with pytest.raises(ArtifactError, match="cannot fetch it from the server: connection reset"):
        deploy(cache_of(tmp_path, channel), 1, pin("hello", PLAIN))
    assert channel.calls == hal.agent.artifacts.TRIES == 3
    assert copies(tmp_path / "artifacts") == []


def test_missing_content_is_not_retried(tmp_path: Path) -> None:
    channel = Channel({}, missing=True)
    with pytest.raises(ArtifactMissing):
        deploy(cache_of(tmp_path, channel), 1, pin("hello", PLAIN))
    assert channel.calls == 1


def test_without_a_channel_nothing_can_be_fetched(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="channel to the server cannot fetch artifacts"):
        deploy(cache_of(tmp_path, None), 1, pin("hello", PLAIN))


# -- PATH ---------------------------------------------------------------------------------


def test_path_entries_of_other_copies_give_way(tmp_path: Path) -> None:
    data = tar_of({"tool-1.0/bin/tool": TOOL}, gz=True)
    other = f"/other/node/artifacts/{sha(data)}/tree/tool-1.0/bin"
    unrelated = f"/other/node/artifacts/{sha(PLAIN)}/file"
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    environment = {"PATH": f"{other}:/usr/bin:{unrelated}"}
    env = asyncio.run(cache.deploy(1, [pin("tool", data)], environment))
    mine = tmp_path / "artifacts" / sha(data) / "tree" / "tool-1.0" / "bin"
    assert env["PATH"] == f"{mine}:/usr/bin:{unrelated}"
    again = asyncio.run(cache.deploy(1, [pin("tool", data)], env))  # (a step of the job)
    assert again["PATH"] == env["PATH"]
    assert environment["PATH"].startswith(other)  # (the caller's dict is not changed)


# -- eviction -----------------------------------------------------------------------------


def kept(data: bytes) -> str:
    """A program's copy's folder name."""
    return f"{sha(data)}.program"


def program(n: int) -> bytes:
    return b"#!/bin/sh\necho %d\n" % n + b"#" * 80  # 100 bytes or so


def age(place: Path, seconds: float) -> None:
    when = os.stat(place / "ready").st_mtime - seconds
    os.utime(place / "ready", (when, when))


def test_eviction_spares_held_copies(tmp_path: Path) -> None:
    a, b, c = program(1), program(2), program(3)
    size = len(a)
    cache = cache_of(tmp_path, Channel({sha(x): x for x in (a, b, c)}), 2 * size + 10, lambda: {1})
    root = tmp_path / "artifacts"
    deploy(cache, 1, pin("a", a))
    deploy(cache, 2, pin("b", b))
    assert sorted(copies(root)) == sorted([kept(a), kept(b)])  # at the limit
    age(root / kept(a), 20)  # a, held by job 1, is the oldest
    age(root / kept(b), 10)
    deploy(cache, 3, pin("c", c))
    assert sorted(copies(root)) == sorted([kept(a), kept(c)])


def test_a_deploy_from_the_cache_makes_a_copy_recent(tmp_path: Path) -> None:
    a, b, c = program(1), program(2), program(3)
    channel = Channel({sha(x): x for x in (a, b, c)})
    cache = cache_of(tmp_path, channel, 2 * len(a) + 10, set)
    root = tmp_path / "artifacts"
    deploy(cache, 1, pin("a", a))
    deploy(cache, 2, pin("b", b))
    age(root / kept(a), 20)
    age(root / kept(b), 10)
    deploy(cache, 4, pin("a", a))  # from the cache: a is now the most recent
    assert channel.calls == 2
    deploy(cache, 3, pin("c", c))
    assert sorted(copies(root)) == sorted([kept(a), kept(c)])


def test_held_copies_stay_over_the_limit(tmp_path: Path) -> None:
    a, b = program(1), program(2)
    cache = cache_of(tmp_path, Channel({sha(a): a, sha(b): b}), 10, lambda: {1, 2})
    deploy(cache, 1, pin("a", a))
    deploy(cache, 2, pin("b", b))
    root = tmp_path / "artifacts"
    assert sorted(copies(root)) == sorted([kept(a), kept(b)])


def test_a_job_no_longer_live_holds_nothing(tmp_path: Path) -> None:
    a, b = program(1), program(2)
    live = {1, 2}
    cache = cache_of(tmp_path, Channel({sha(a): a, sha(b): b}), len(a) + 10, lambda: live)
    root = tmp_path / "artifacts"
    deploy(cache, 1, pin("a", a))
    age(root / kept(a), 10)
    live.discard(1)  # job 1 ended
    deploy(cache, 2, pin("b", b))
    assert copies(root) == [kept(b)]


def test_a_restarted_agent_keeps_the_copies_its_adopted_jobs_hold(tmp_path: Path) -> None:
    """The holds are files: an agent started again (a new cache on the same folder)
    adopts job 1, still running, and its copy stays."""
    a, b = program(1), program(2)
    channel = Channel({sha(a): a, sha(b): b})
    deploy(cache_of(tmp_path, channel, len(a) + 10, lambda: {1}), 1, pin("a", a))
    root = tmp_path / "artifacts"
    age(root / kept(a), 10)
    deploy(cache_of(tmp_path, channel, len(a) + 10, lambda: {1, 2}), 2, pin("b", b))
    assert copies(root) == sorted([kept(a), kept(b)])


def test_a_node_disk_that_cannot_keep_a_copy_fails_as_an_artifact_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-folder").write_text("")
    data = program(1)
    cache = ArtifactCache(
        tmp_path / "not-a-folder" / "artifacts", Channel({sha(data): data}), 10**9, set
    )
    with pytest.raises(ArtifactError, match="cannot keep a copy on this node"):
        deploy(cache, 1, pin("a", data))


def test_path_is_not_made_up_and_its_empty_entries_stay(tmp_path: Path) -> None:
    data = tar_of({"share/readme": b"no bin here"})
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    assert "PATH" not in asyncio.run(cache.deploy(1, [pin("docs", data)], {}))
    env = asyncio.run(cache.deploy(1, [pin("docs", data)], {"PATH": "/bin::."}))
    assert env["PATH"] == "/bin::."


@pytest.mark.parametrize("cut", [60, 200])
def test_a_cut_off_compressed_archive_fails_as_an_artifact_error(tmp_path: Path, cut: int) -> None:
    """(An EOFError from the decompressor left the launch hanging.)"""
    whole = tar_of({"tool/bin/tool": TOOL + os.urandom(4000)}, gz=True)
    data = whole[:cut]
    assert len(whole) > cut
    cache = cache_of(tmp_path, Channel({sha(data): data}))
    with pytest.raises(ArtifactError, match="cannot unpack it"):
        deploy(cache, 1, pin("tool", data, "archive"))
    assert copies(tmp_path / "artifacts") == []


def test_an_archive_that_is_no_tar_or_zip_is_refused(tmp_path: Path) -> None:
    cache = cache_of(tmp_path, Channel({sha(PLAIN): PLAIN}))
    with pytest.raises(ArtifactError, match=r"no tar or zip archive .*--kind program"):
        deploy(cache, 1, pin("hello", PLAIN, "archive"))


def test_a_program_that_looks_like_a_zip_is_kept_as_a_program(tmp_path: Path) -> None:
    """A Python zipapp (a shebang line, then a zip): published as a program, it runs."""
    zipapp = io.BytesIO()
    with zipfile.ZipFile(zipapp, "w") as z:
        z.writestr("__main__.py", "print('zipapp ran')\n")
    data = b"#!/usr/bin/env python3\n" + zipapp.getvalue()
    assert zipfile.is_zipfile(io.BytesIO(data))  # what fooled the node before
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("app", data))
    assert run("app", env) == "zipapp ran\n"


def test_an_archive_whose_one_top_folder_is_bin_puts_it_on_path(tmp_path: Path) -> None:
    data = tar_of({"bin/tool": TOOL})
    env = deploy(cache_of(tmp_path, Channel({sha(data): data})), 1, pin("tool", data))
    tree = tmp_path / "artifacts" / sha(data) / "tree"
    assert env["HAL_ARTIFACT_TOOL"] == str(tree)
    assert env["PATH"] == f"{tree}/bin:{BASE_PATH}"


def test_a_job_without_path_keeps_the_default_after_the_artifacts(tmp_path: Path) -> None:
    """(--export=NONE: PATH held only the artifacts' folders, and /usr/bin was gone.)"""
    cache = cache_of(tmp_path, Channel({sha(PLAIN): PLAIN}))
    env = asyncio.run(cache.deploy(1, [pin("hello", PLAIN)], {}))
    assert env["PATH"].split(":")[1:] == DEFAULT_PATH.split(":")


def test_ended_jobs_holds_go_without_a_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deploys from the copy alone (no fetch) still forget the holds of ended jobs."""
    monkeypatch.setattr(hal.agent.artifacts, "PRUNE_EVERY", 4)
    live = {1}
    cache = cache_of(tmp_path, Channel({sha(PLAIN): PLAIN}), live=lambda: live)
    for job in range(1, 4):
        deploy(cache, job, pin("hello", PLAIN))
    holds = tmp_path / "artifacts" / HOLDS
    assert sorted(p.name for p in holds.iterdir()) == ["1", "2", "3"]
    deploy(cache, 4, pin("hello", PLAIN))  # the 4th deploy: jobs 2, 3 and 4 are not live
    assert sorted(p.name for p in holds.iterdir()) == ["1"]


# -- inventory ----------------------------------------------------------------------------


def test_the_inventory_lists_copies_their_sizes_and_holds(tmp_path: Path) -> None:
    a, b = program(1), program(2)
    live = {1, 2}
    cache = cache_of(tmp_path, Channel({sha(a): a, sha(b): b}), 10**6, lambda: live)
    deploy(cache, 1, pin("a", a))
    deploy(cache, 2, pin("b", b))
    live.discard(2)  # job 2 ended: b is no longer held
    before = cache.changes
    report = cache.inventory(live)
    assert report.limit_bytes == 10**6
    got = {c.name: (c.size, c.held) for c in report.copies}
    assert got == {kept(a): (len(a), True), kept(b): (len(b), False)}
    assert (tmp_path / "artifacts" / HOLDS / "2").exists()  # reading forgets nothing
    assert cache.changes == before
    deploy(cache, 3, pin("a", a))
    assert cache.changes > before  # a deploy moves the holds: the agent reports again
