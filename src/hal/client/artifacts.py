"""Publishing and fetching artifacts' content (docs/user/artifacts.md): streamed with httpx,
as files may be far larger than the rest of the API's bodies (``HalClient``'s own
transport reads whole bodies)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from hal.client.transport import Response
from hal.core.artifacts import IMAGE, PROGRAM, check_kind, kind_of_name
from hal.core.errors import InvalidRequest, Unavailable
from hal.wire.artifacts import KIND_HEADER, SHA256_HEADER

if TYPE_CHECKING:
    from hal.client.sync import HalClient

PIECE = 1024 * 1024
TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # between two pieces, not for the whole file


def path_of(name: str, version: str) -> str:
    return f"/v1/artifacts/{quote(name, safe='')}/{quote(version, safe='')}"


def alias_path(name: str, alias: str | None = None) -> str:
    """``/v1/artifact-aliases/NAME[/ALIAS]``."""
    path = f"/v1/artifact-aliases/{quote(name, safe='')}"
    return path if alias is None else f"{path}/{quote(alias, safe='')}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(PIECE):
            digest.update(piece)
    return digest.hexdigest()


def push(
    client: HalClient, name: str, version: str, path: Path, kind: str | None = None
) -> tuple[bytes, bool]:
    """PUT the file, with its sha256 and kind (None: an archive by its suffix, else a
    program); (the version's JSON, whether it is new)."""
    if not path.is_file():
        raise InvalidRequest(
            f"{path} is no file: give the file to publish (a tar or zip archive, or a "
            "program); pack a folder first (tar czf NAME.tgz FOLDER)"
        )
    headers = {SHA256_HEADER: file_sha256(path), "Content-Type": "application/octet-stream"}
    kind = check_kind(kind) if kind else kind_of_name(path.name)
    if kind == IMAGE:
        from hal.host.oci import image_facts

        image_facts(path)  # refused here, before the upload, when it is no OCI image
    params = {"kind": kind}
    with _http(client) as http, open(path, "rb") as f:
        try:
            url = path_of(name, version)
            response = http.put(url, content=f, headers=headers, params=params)
        except httpx.HTTPError as err:
            raise _away(client, err) from err
    _check(response, response.content)
    return response.content, response.status_code == 201


def pull(client: HalClient, name: str, version: str, dest: Path) -> str:
    """GET the content into ``dest`` (written beside it, then renamed; executable for a
    program, as the response says); returns its sha256, checked against the server's."""
    if not dest.parent.is_dir():
        raise InvalidRequest(f"cannot write {dest}: folder {dest.parent} does not exist")
    part = dest.with_name(f".{dest.name}.part")
    digest = hashlib.sha256()
    try:
        with _http(client) as http:
            try:
                with http.stream("GET", path_of(name, version) + "/content") as response:
                    if response.status_code >= 400:
                        _check(response, response.read())
                    with open(part, "wb") as f:
                        for piece in response.iter_bytes(PIECE):
                            digest.update(piece)
                            f.write(piece)
                    expected = str(response.headers.get(SHA256_HEADER, ""))
                    executable = response.headers.get(KIND_HEADER) == PROGRAM
            except httpx.HTTPError as err:
                raise _away(client, err) from err
        if digest.hexdigest() != expected:
            raise Unavailable(
                f"the content received is not what the server holds (sha256 {expected}); "
                "fetch it again"
            )
        if executable:
            part.chmod(0o755)  # (a program, as published)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return expected


def _http(client: HalClient) -> httpx.Client:
    headers = {"User-Agent": "hal-client"}
    if client.config.token:
        headers["Authorization"] = f"Bearer {client.config.token}"
    from hal.host.tls import verify_for

    url = client.leader_url()
    return httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT, verify=verify_for(url))


def _away(client: HalClient, err: httpx.HTTPError) -> Unavailable:
    return Unavailable(
        f"lost the HAL server at {client.config.url} ({err}); is it running? "
        "Send the file again: a version is stored whole or not at all"
    )


def _check(response: httpx.Response, body: bytes) -> None:
    from hal.client.problems import error_from_response

    if response.status_code >= 400:
        headers = dict(response.headers)
        raise error_from_response(
            Response(response.status_code, response.reason_phrase, headers, body)
        )
