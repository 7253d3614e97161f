"""Fetch a dataset version's blobs from the S3-compatible dataset store onto this node.

``python -m gpupool.executors.blobfetch --endpoint URL --bucket B --prefix P --region R
--manifest HEX --into DIR``: the version's manifest, then each blob it lists, downloaded
below ``DIR`` in the POSIX store's layout (``blobs/<2 hex>/<hex>``, read-only), each checked
against its SHA-256 as it arrives. The runner (``runner.datasets``) spawns it with the
server's interpreter before the job's sandbox exists, then links the version's files from
``DIR`` exactly as from a POSIX store: the runner itself stays stdlib-only, and this module
is the only place a node loads boto3.

The credentials are the node's own: the standard AWS chain of the account that runs the
node (its environment, ~/.aws), never sent with the task and never given to the job.

It says how far it is on stdout (one line per step: ``N of M blobs, X of Y bytes``); it
exits 0 once every blob is there, ``EXIT_MISSING`` (naming it on stderr) when the store
lacks the manifest or a blob, 1 on any other failure (the store does not answer, a blob's
bytes do not match its hash).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import sys
import tempfile
from typing import Any

EXIT_MISSING = 3
PARALLEL = 8  # blobs downloaded at once (many small files are the common slow case)
CHUNK = 1024 * 1024


class Missing(Exception):
    """The store lacks a blob or the manifest."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpupool.executors.blobfetch")
    for name in ("endpoint", "bucket", "prefix", "region", "manifest", "into"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args(argv)
    try:
        client = _client(args.endpoint, args.region)
        fetch(client, args.bucket, args.prefix, args.manifest, args.into, _say)
    except Missing as problem:
        print(str(problem), file=sys.stderr)
        return EXIT_MISSING
    except Exception as problem:  # noqa: BLE001 - one line for the job's record
        print(f"fetching from s3://{args.bucket}/{args.prefix} failed: {problem}", file=sys.stderr)
        return 1
    return 0


def fetch(client: Any, bucket: str, prefix: str, manifest: str, into: str, say) -> None:  # noqa: ANN001
    """The manifest ``manifest`` and every blob it lists, below ``into`` (made)."""
    _download(client, bucket, prefix, manifest, into)
    with open(_path(into, manifest), "rb") as file:
        raw = json.load(file)
    sizes: dict[str, int] = {}
    for entry in raw.get("files") or []:
        sha = entry.get("sha256")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise Missing(f"the manifest {manifest} is malformed")
        sizes[sha] = int(entry.get("size") or 0)
    total, done, done_bytes = sum(sizes.values()), 0, 0
    say(f"0 of {len(sizes):,} blobs, 0 of {total:,} bytes")
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        futures = {pool.submit(_download, client, bucket, prefix, sha, into): sha for sha in sizes}
        for future in concurrent.futures.as_completed(futures):
            future.result()
            done, done_bytes = done + 1, done_bytes + sizes[futures[future]]
            say(f"{done:,} of {len(sizes):,} blobs, {done_bytes:,} of {total:,} bytes")


def _download(client: Any, bucket: str, prefix: str, sha: str, into: str) -> None:
    """The blob ``sha`` at its place below ``into`` (0444), unless there; checked."""
    final = _path(into, sha)
    if os.path.exists(final):
        return
    os.makedirs(os.path.dirname(final), mode=0o700, exist_ok=True)
    key = f"{prefix}blobs/{sha[:2]}/{sha}"
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
    except client.exceptions.NoSuchKey:
        raise Missing(f"the blob {sha} is not in s3://{bucket}/{prefix}") from None
    fd, part = tempfile.mkstemp(prefix=".part-", dir=os.path.dirname(final))
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as file:
            while chunk := body.read(CHUNK):
                digest.update(chunk)
                file.write(chunk)
        if digest.hexdigest() != sha:
            raise ValueError(f"the blob {sha} read from the store has another SHA-256")
        os.chmod(part, 0o444)
        os.replace(part, final)
    finally:
        if os.path.exists(part):
            os.unlink(part)


def _path(into: str, sha: str) -> str:
    return os.path.join(into, "blobs", sha[:2], sha)


def _client(endpoint: str, region: str) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise RuntimeError(
            "boto3 is not installed on this node: install gpupool with its s3 extra "
            "(pip install 'gpupool[s3]') to read datasets from an S3-compatible store"
        ) from None
    config = Config(
        retries={"max_attempts": 5, "mode": "standard"},
        s3={"addressing_style": "path"},
        max_pool_connections=PARALLEL,
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=region, config=config
    )


def _say(text: str) -> None:
    print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
