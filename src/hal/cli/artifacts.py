"""``hal artifact``: publish, list, fetch and remove artifacts (docs/user/artifacts.md)."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from hal.core.artifacts import ARCHIVE, HEAD, LATEST, parse_request, suffix_of
from hal.core.errors import InvalidRequest
from hal.wire.artifacts import AliasInfo, ArtifactInfo, NodeInventory


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "artifact",
        help="pinned software for jobs (--artifact): push, list, pull, rm, promote, rollback, "
        "aliases, nodes",
    )
    verbs = p.add_subparsers(
        dest="verb",
        required=True,
        metavar="{push,list,show,pull,rm,promote,rollback,aliases,nodes}",
    )
    push = verbs.add_parser(
        "push",
        help="publish FILE (or an image built from --dockerfile) as NAME@VERSION (versions "
        "never change)",
    )
    push.add_argument("artifact", metavar="NAME@VERSION")
    push.add_argument(
        "file",
        type=Path,
        nargs="?",
        default=None,
        metavar="FILE",
        help="a tar or zip archive, a program, or an OCI image tarball",
    )
    push.add_argument(
        "--dockerfile",
        type=Path,
        default=None,
        metavar="FILE",
        help="build the image with podman here and publish it (kind image)",
    )
    push.add_argument(
        "--context",
        type=Path,
        default=None,
        metavar="DIR",
        help="the build's context (default: the Dockerfile's folder)",
    )
    push.add_argument(
        "--kind",
        choices=("archive", "program", "image"),
        default=None,
        help="archive: the nodes unpack it; program: kept as it is; image: an OCI image "
        "tarball jobs run in with --container (default: an image when FILE ends .oci.tar, "
        "an archive when it ends .tar, .tar.gz, .tgz, .tar.bz2, .tbz2, .tar.xz, .txz or .zip)",
    )
    push.add_argument("--json", action="store_true")
    push.set_defaults(func=cmd_push, late_positional="file", late_positional_type=Path)
    listing = verbs.add_parser("list", help="the published versions (of NAME), newest first")
    listing.add_argument("name", nargs="?", default=None, metavar="NAME")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    show = verbs.add_parser("show", help="one version (NAME alone: the newest)")
    show.add_argument("artifact", metavar="NAME[@VERSION]")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_show)
    pull = verbs.add_parser("pull", help="download a version's file")
    pull.add_argument("artifact", metavar="NAME[@VERSION]")
    pull.add_argument(
        "-o", "--output", default=None, help="the file, or a folder (default: ./NAME-VERSION)"
    )
    pull.set_defaults(func=cmd_pull)
    rm = verbs.add_parser("rm", help="remove a version no unfinished job pins")
    rm.add_argument("artifact", metavar="NAME@VERSION")
    rm.set_defaults(func=cmd_rm)
    promote = verbs.add_parser(
        "promote", help="point an alias (NAME@stable) at a version, or start a canary of it"
    )
    promote.add_argument("artifact", metavar="NAME@VERSION")
    promote.add_argument("--to", required=True, metavar="ALIAS", help="e.g. stable")
    promote.add_argument(
        "--canary",
        default=None,
        metavar="SHARE",
        help="give only this share of the jobs naming the alias the version, e.g. 10%%; "
        "the others keep the alias's version (promote again without --canary to finish)",
    )
    promote.add_argument("--json", action="store_true")
    promote.set_defaults(func=cmd_promote)
    back = verbs.add_parser(
        "rollback", help="end an alias's canary, or point it at the version it named before"
    )
    back.add_argument("name", metavar="NAME")
    back.add_argument("--alias", default="stable", help="the alias (default stable)")
    back.set_defaults(func=cmd_rollback)
    aliases = verbs.add_parser("aliases", help="a name's aliases, their versions and canaries")
    aliases.add_argument("name", metavar="NAME")
    aliases.add_argument("--json", action="store_true")
    aliases.set_defaults(func=cmd_aliases)
    nodes = verbs.add_parser(
        "nodes", help="which nodes hold which versions (of NAME), and their caches"
    )
    nodes.add_argument("name", nargs="?", default=None, metavar="NAME")
    nodes.add_argument("--json", action="store_true")
    nodes.set_defaults(func=cmd_nodes)


def _pinned(text: str) -> tuple[str, str]:
    name, version = parse_request(text)
    if "@" not in text:
        raise InvalidRequest(f"give the version: {name}@VERSION", field="artifact")
    if version.lower() == LATEST:
        raise InvalidRequest(
            f"{version!r} means the newest version when a job names one; here give the "
            f"version itself: {name}@VERSION (hal artifact list {name})",
            field="artifact",
        )
    return name, version


def cmd_push(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    name, version = _pinned(ns.artifact)
    if ns.dockerfile is not None:
        _check_build(ns)
        from hal.cli.image_build import built_image, image_tag

        tag = image_tag(name, version)
        with built_image(ns.dockerfile, ns.context, tag) as archive, HalClient() as client:
            artifact, new = client.push_artifact(name, version, archive, "image")
    else:
        if ns.file is None:
            raise InvalidRequest(
                "give the FILE to publish, or --dockerfile FILE to build an image from",
                field="file",
            )
        if ns.context is not None:
            raise InvalidRequest("--context goes with --dockerfile", field="context")
        with HalClient() as client:
            artifact, new = client.push_artifact(name, version, ns.file, ns.kind)
    if ns.json:
        print(artifact.model_dump_json(indent=2))
    else:
        said = "published" if new else "already published with this content:"
        print(f"{said} {artifact.name}@{artifact.version} ({_facts(artifact)})")
    return 0


def _check_build(ns: argparse.Namespace) -> None:
    if ns.file is not None:
        raise InvalidRequest(
            f"give either FILE ({ns.file}) or --dockerfile, not both", field="dockerfile"
        )
    if ns.kind not in (None, "image"):
        raise InvalidRequest(
            f"--dockerfile builds an image, not {'an' if ns.kind == 'archive' else 'a'} "
            f"{ns.kind}: drop --kind",
            field="kind",
        )


def cmd_list(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        found = client.artifacts(ns.name)
    if ns.json:
        print("[" + ",".join(a.model_dump_json() for a in found) + "]")
        return 0
    print(render(found), end="")
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    name, version = parse_request(ns.artifact)
    with HalClient() as client:
        artifact = client.artifact(name, version)
    if ns.json:
        print(artifact.model_dump_json(indent=2))
        return 0
    a = artifact
    print(
        f"Name={a.name} Version={a.version} Kind={a.kind} Size={a.size} Owner={a.owner}\n"
        f"   Published={_when(a.created)} Sha256={a.sha256}"
    )
    return 0


def cmd_pull(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    name, version = parse_request(ns.artifact)
    with HalClient() as client:
        artifact = client.artifact(name, version)
        file = f"{artifact.name}-{artifact.version}"
        output: str = ns.output or file
        dest = Path(output)
        named = not ns.output  # the name is ours: the suffix is added
        if output.endswith("/") or dest.is_dir():
            dest, named = dest / file, True
        client.pull_artifact(artifact.name, artifact.version, dest)
    if named and artifact.kind == ARCHIVE:  # with the suffix its content says it has
        with open(dest, "rb") as f:
            suffixed = dest.with_name(dest.name + suffix_of(f.read(HEAD)))
        os.replace(dest, suffixed)
        dest = suffixed
    print(f"{dest} ({_facts(artifact)})")
    return 0


def cmd_rm(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    name, version = _pinned(ns.artifact)
    with HalClient() as client:
        artifact = client.remove_artifact(name, version)
    print(f"removed {artifact.name}@{artifact.version}")
    return 0


def cmd_promote(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    name, version = _pinned(ns.artifact)
    with HalClient() as client:
        moved = client.promote_artifact(name, version, ns.to, ns.canary)
    if ns.json:
        print(moved.model_dump_json(indent=2))
    elif ns.canary is not None:
        print(
            f"{name}@{moved.alias}: canary {moved.canary} for {moved.share:g}% of the jobs "
            f"naming it, {moved.version} for the others"
        )
    else:
        print(f"{name}@{moved.alias} is {moved.version} (sha256 {moved.sha256})")
    return 0


def cmd_rollback(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        moved = client.rollback_artifact(ns.name, ns.alias)
    print(f"{ns.name}@{moved.alias} is {moved.version} (sha256 {moved.sha256}), no canary")
    return 0


def cmd_aliases(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        found = client.artifact_aliases(ns.name)
    if ns.json:
        print("[" + ",".join(a.model_dump_json() for a in found) + "]")
        return 0
    print(render_aliases(ns.name, found), end="")
    return 0


def render_aliases(name: str, found: list[AliasInfo]) -> str:
    if not found:
        return f"{name} has no aliases: hal artifact promote {name}@VERSION --to stable\n"
    lines = [f"{'ALIAS':<12} {'VERSION':<14} {'CANARY':<22} {'SINCE':<19}  BEFORE"]
    for a in found:
        canary = f"{a.canary} ({a.share:g}%)" if a.canary else "-"
        lines.append(
            f"{a.alias:<12} {a.version:<14} {canary:<22} {_when(a.since):<19}  "
            f"{','.join(reversed(a.history[-5:])) or '-'}"
        )
        if a.canary:
            lines.append(
                f"  jobs ended since the canary: {a.canary} {a.canary_failed}/{a.canary_jobs} "
                f"failed, {a.version} {a.previous_failed}/{a.previous_jobs} failed"
            )
        if a.rolled_back:
            r = a.rolled_back
            lines.append(
                f"  rolled back {r.get('from')} at {_when(float(r.get('time', 0)))}: "
                f"{r.get('canary_failed')}/{r.get('canary_jobs')} failed against "
                f"{r.get('previous_failed')}/{r.get('previous_jobs')} (p={r.get('p_value'):.2g})"
            )
    return "\n".join(lines) + "\n"


def cmd_nodes(ns: argparse.Namespace) -> int:
    from hal.client import HalClient

    with HalClient() as client:
        found = client.artifact_nodes(ns.name)
    if ns.json:
        print("[" + ",".join(n.model_dump_json() for n in found) + "]")
        return 0
    print(render_nodes(found), end="")
    return 0


def render_nodes(found: list[NodeInventory]) -> str:
    if not found:
        return "no node has reported its artifact cache yet\n"
    lines = []
    for n in found:
        lines.append(
            f"{n.node}: {_size(n.used_bytes)} of {_size(n.limit_bytes)} "
            f"({len(n.copies)} cop{'y' if len(n.copies) == 1 else 'ies'} shown)"
        )
        for c in n.copies:
            what = ",".join(c.versions) or ("python-env" if c.kind == "python-env" else "-")
            held = "  in use" if c.held else ""
            lines.append(
                f"  {what:<28} {c.kind:<10} {_size(c.size):>9}  {c.sha256[:12]}  "
                f"used {_when(c.used)}{held}"
            )
    return "\n".join(lines) + "\n"


def render(found: list[ArtifactInfo]) -> str:
    if not found:
        return "no artifacts: publish one with hal artifact push NAME@VERSION FILE\n"
    lines = [f"{'NAME':<20} {'VERSION':<14} {'SIZE':>9}  {'PUBLISHED':<19}  {'OWNER':<10} SHA256"]
    for a in found:
        lines.append(
            f"{a.name:<20} {a.version:<14} {_size(a.size):>9}  {_when(a.created):<19}  "
            f"{a.owner:<10} {a.sha256[:12]}"
        )
    return "\n".join(lines) + "\n"


def _facts(a: ArtifactInfo) -> str:
    return f"{_size(a.size)}, sha256 {a.sha256}"


def _size(size: int) -> str:
    if size < 1024:
        return f"{size}B"
    scaled = float(size)
    for unit in ("K", "M", "G", "T"):
        scaled /= 1024
        if scaled < 1024 or unit == "T":
            break
    return f"{scaled:.1f}{unit}"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))
