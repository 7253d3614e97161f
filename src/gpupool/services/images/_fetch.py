"""Fetching an image into the image store with skopeo, and unpacking it for this node.

Every fetch writes a fresh OCI layout under ``incoming/`` (``skopeo copy SOURCE
oci:DIR:image``), reads the digest of the manifest it wrote, and renames the layout to
``oci/<hex>`` unless that digest is kept already (then the copy is dropped): the same
image fetched twice, by two teams or under two names, is stored once. No transaction is
open meanwhile. The image's tree is then unpacked for this node (``executors.images``),
which also refuses an image that cannot be unpacked safely, before anyone may use it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpupool.errors import BadImageArchive, ImagePullFailed, ImagesUnavailable
from gpupool.executors import images as node_images
from gpupool.executors.images import ImageConfig, ImageError

OCI = "oci"
ROOTS = "roots"
INCOMING = "incoming"


@dataclass(frozen=True)
class Fetched:
    """An image in the store: its digest, size and config."""

    digest: str
    size_bytes: int
    config: ImageConfig


def layout_path(store: Path, digest: str) -> Path:
    return store / OCI / digest.removeprefix("sha256:")


def fetch(
    store: Path, source: str, tls_verify: bool, timeout: float, failed: type[Exception]
) -> Fetched:
    """Copy ``source`` (a skopeo transport: ``docker://...``, ``oci-archive:FILE``...) into
    the store and unpack it for this node; ``failed`` (an error class) is raised with
    skopeo's or umoci's message when it cannot be."""
    missing = [tool for tool in ("skopeo", "umoci") if shutil.which(tool) is None]
    if missing:
        raise ImagesUnavailable(
            f"{' and '.join(missing)} not installed on the server: "
            + (ImagesUnavailable.__doc__ or "").split(": ", 1)[-1].strip()
        )
    incoming = store / INCOMING
    incoming.mkdir(parents=True, exist_ok=True, mode=0o700)
    work = Path(tempfile.mkdtemp(prefix="fetch-", dir=incoming))
    try:
        layout = work / "layout"
        argv = ["skopeo", "--insecure-policy", "copy", "-q"]
        if source.startswith("docker://"):
            argv.append(f"--src-tls-verify={'true' if tls_verify else 'false'}")
        argv += [source, f"oci:{layout}:{node_images.TAG}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise failed(f"fetching the image took over {timeout:.0f} s: try again later") from None
        except OSError as e:
            raise ImagesUnavailable(f"skopeo could not run: {e}") from e
        if done.returncode != 0:
            raise failed(f"{_last_line(done.stderr or done.stdout)}: {failed.__doc__}")
        try:
            digest = node_images.layout_digest(layout)
            final = layout_path(store, digest)
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            moved = not final.exists()
            if moved:
                os.rename(layout, final)
            try:
                unpacked = node_images.unpack_once(final, digest, store / ROOTS)
            except ImageError:
                if moved:  # an image no one may use is not kept
                    shutil.rmtree(final, ignore_errors=True)
                raise
            return Fetched(digest, node_images.layout_size(final), unpacked.config)
        except ImageError as e:
            raise failed(f"the image cannot be used: {e.message}") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def archive_kind(path: Path) -> tuple[str, str | None]:
    """``("oci-archive" | "docker-archive", the name it carries or None)`` for an image
    archive; BadImageArchive for anything else. Only member names and the small index are
    read, never extracted."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            names = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            if "oci-layout" in names and "index.json" in names:
                index = json.loads(_read(tar, names["index.json"]))
                manifests = index.get("manifests") or []
                if len(manifests) != 1:
                    raise BadImageArchive(
                        f"the OCI archive holds {len(manifests)} images: import one at a time "
                        "(skopeo copy writes one)"
                    )
                annotations = manifests[0].get("annotations") or {}
                return "oci-archive", annotations.get("org.opencontainers.image.ref.name")
            if "manifest.json" in names:
                manifest = json.loads(_read(tar, names["manifest.json"]))
                if not isinstance(manifest, list) or len(manifest) != 1:
                    raise BadImageArchive(
                        "the docker archive holds several images: save one ('docker save "
                        "NAME:TAG -o FILE.tar')"
                    )
                tags = manifest[0].get("RepoTags") or []
                return "docker-archive", tags[0] if tags else None
    except (tarfile.TarError, OSError, ValueError, AttributeError, TypeError) as e:
        said = f"the upload is not a readable tar ({e}): {BadImageArchive.__doc__}"
        raise BadImageArchive(said) from None
    raise BadImageArchive(
        "the tar holds neither an OCI layout (oci-layout, index.json) nor docker save's "
        "manifest.json: " + (BadImageArchive.__doc__ or "")
    )


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int = 1 << 20) -> bytes:
    if not member.isfile() or member.size > limit:
        raise BadImageArchive(f"{member.name} in the archive is not a small file")
    stream = tar.extractfile(member)
    return stream.read() if stream is not None else b""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    said = lines[-1] if lines else "skopeo gave no message"
    return said.removeprefix("time=").split(' msg="', 1)[-1].rstrip('"')


__all__ = ["Fetched", "ImagePullFailed", "archive_kind", "fetch", "layout_path"]
