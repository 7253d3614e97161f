"""Container images: their names, the registries a site allows, and what the API shows.

An image is an OCI image kept by the digest of its manifest (``sha256:<hex>``): pulled from
a registry the site allows (``GPUPOOL_IMAGE_REGISTRIES``) or imported from an archive. A
team's members name it by the name it was pulled or imported as (``registry/path:tag``), or
by its digest; a job records the digest at submit, so a tag moved later does not change it.

Images belong to a team (its members use, list and remove them); an admin's image pulled
without a team is the site's, usable by every team and removed only by an admin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, Field

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
# a registry host: a DNS name or an IPv4 address, and a port
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9-]{1,63})*(?::[0-9]{1,5})?"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH = rf"{_COMPONENT}(?:/{_COMPONENT}){{0,15}}"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
REFERENCE = re.compile(
    rf"(?:(?P<host>{_HOST})/)?(?P<path>{_PATH})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>sha256:[0-9a-f]{{64}}))?"
)
NAME_RULE = (
    "an image is named [registry/]path[:tag][@sha256:...] as docker names it: lower-case "
    "path components of letters, digits and . _ - separated by /, a tag of up to 128 "
    "letters, digits and . _ -"
)
DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
MAX_NAME = 255


@dataclass(frozen=True)
class Reference:
    """A parsed image name: the registry's host, the path in it, a tag, a digest."""

    host: str
    path: str
    tag: str
    digest: str | None = None

    @property
    def name(self) -> str:
        """The name it is listed under: host/path:tag (@digest when pinned)."""
        pinned = f"@{self.digest}" if self.digest else ""
        return f"{self.host}/{self.path}:{self.tag}{pinned}"

    @property
    def source(self) -> str:
        """What skopeo reads: ``docker://host/path`` with the digest when pinned, else the tag."""
        at = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"docker://{self.host}/{self.path}{at}"


def parse_reference(text: str) -> Reference:
    """``text`` as docker reads an image name (``ubuntu`` is ``docker.io/library/ubuntu:latest``);
    ValueError when it is not one."""
    match = REFERENCE.fullmatch(text) if 0 < len(text) <= MAX_NAME else None
    if match is None:
        raise ValueError(NAME_RULE)
    host, path = match["host"], match["path"]
    if host is not None and not _is_host(host):  # "library/ubuntu": a path, not a host
        host, path = None, f"{host}/{path}"
        if REFERENCE.fullmatch(path) is None:
            raise ValueError(NAME_RULE)
    if host is None:
        host = DEFAULT_REGISTRY
        if "/" not in path:
            path = f"library/{path}"
    return Reference(host=host, path=path, tag=match["tag"] or DEFAULT_TAG, digest=match["digest"])


def _is_host(text: str) -> bool:
    """Docker's rule: a first component is a registry when it has a dot or a port, or is
    localhost."""
    return "." in text or ":" in text or text == "localhost"


def import_name(text: str) -> str:
    """The name an imported image is listed under: ``path[:tag]`` (no registry: it came from
    no registry), ``:latest`` when no tag is given; ValueError when it is not a name."""
    match = REFERENCE.fullmatch(text) if 0 < len(text) <= MAX_NAME else None
    if match is None or match["digest"] or (match["host"] and _is_host(match["host"])):
        raise ValueError(
            "an imported image is named path[:tag] (no registry, no digest): lower-case path "
            "components of letters, digits and . _ - separated by /, a tag of up to 128 "
            "letters, digits and . _ -"
        )
    path = f"{match['host']}/{match['path']}" if match["host"] else match["path"]
    return f"{path}:{match['tag'] or DEFAULT_TAG}"


def lookup(text: str) -> tuple[list[str], str | None]:
    """What an image named ``text`` by a user may be listed as: ``([], digest)`` for a
    digest, else the names it may be listed under (as typed, as an imported image's name,
    as a pulled image's full name)."""
    if DIGEST.fullmatch(text):
        return [], text
    names = [text]
    for parse in (import_name, lambda t: parse_reference(t).name):
        try:
            names.append(parse(text))
        except ValueError:
            continue
    return list(dict.fromkeys(names)), None


@dataclass(frozen=True)
class AllowedRegistry:
    """A registry the site allows pulls from; ``tls_verify`` False for a registry on the
    site's own network served over plain HTTP or with a certificate no CA signs."""

    host: str
    tls_verify: bool = True


def parse_registries(text: str) -> dict[str, AllowedRegistry]:
    """``GPUPOOL_IMAGE_REGISTRIES``: ``host[:port][=insecure]``, comma-separated, by host."""
    allowed: dict[str, AllowedRegistry] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, _, flag = entry.partition("=")
        if flag not in ("", "insecure") or not re.fullmatch(_HOST, host):
            raise ValueError(
                f"GPUPOOL_IMAGE_REGISTRIES: {entry!r} is not host[:port] or host[:port]=insecure"
            )
        allowed[host.lower()] = AllowedRegistry(host.lower(), tls_verify=flag != "insecure")
    return allowed


class ImageView(BaseModel):
    """An image a team (or the site) holds."""

    name: str = Field(description="what it was pulled or imported as: registry/path:tag")
    digest: str = Field(description="the manifest's digest: what a job that uses it records")
    team: str | None = Field(description="its team; none: the site's, for every team")
    source: str = Field(description="pull (from a registry) or import (from an archive)")
    size_bytes: int = Field(description="the image's layers and config as stored")
    env: list[str] = Field(description="its Env (NAME=value), under a job's own env")
    entrypoint: list[str] = Field(description="its Entrypoint, before a job's command")
    cmd: list[str] = Field(description="its Cmd (a job's command replaces it)")
    workdir: str = Field(description="its WorkingDir: where a job without one starts")
    created_at: float
    created_by: str
