"""Where the dataset store keeps its blobs: the port (``BlobStore``) and its two stores.

- ``PosixStore`` (the default): a directory, ``blobs/<first 2 hex>/<hex>``, local or on a
  file system the nodes share (NFS, CephFS, Lustre); nodes hard-link from it.
- ``S3Store`` (GPUPOOL_DATASETS_S3_ENDPOINT set): an S3-compatible object store through
  boto3 (the ``s3`` extra), the same layout below the bucket's ``GPUPOOL_DATASETS_S3_PREFIX``;
  nodes fetch a version's blobs into a cache of their own (``executors.blobfetch``).
  Credentials come from the standard AWS chain of the account that runs the server (its
  environment, ~/.aws): gpupool neither keeps nor passes them on.

Uploads, versions made from jobs, manifests and the collection of unreferenced blobs all go
through the port; the part files an upload is received into stay on the server's disk
(``_blobs.Incoming``) until their hash is checked, and are then put into the store.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from gpupool.errors import DatasetStoreUnavailable, StorageFull
from gpupool.settings import Settings

BLOBS = "blobs"
MAX_COPY_BYTES = 5 * 1024**3  # what one S3 CopyObject may copy
INCOMING = "incoming"  # blobs being received, below the POSIX store (and the data directory)


def blob_key(sha256: str) -> str:
    """Where the blob ``sha256`` (hex) is kept, relative to the store (the POSIX store's
    directory, or the S3 store's prefix)."""
    return f"{BLOBS}/{sha256[:2]}/{sha256}"


class BlobStore(Protocol):
    """What the datasets need of the place their blobs are kept."""

    def has(self, sha256: str) -> bool:
        """Whether the blob is kept."""
        ...

    def put(self, sha256: str, path: Path) -> None:
        """Keep the file ``path`` (whose SHA-256 the caller checked) as the blob: once this
        returns a crash keeps it. Kept already: it is touched instead (its change time
        now), so that a collection leaves it to the upload recording it. The file may be
        taken (renamed): the caller removes what is left."""
        ...

    def open(self, sha256: str) -> BinaryIO | None:
        """The blob's bytes to read (close it), None when it is not kept."""
        ...

    def size(self, sha256: str) -> int | None:
        """The blob's size, None when it is not kept."""
        ...

    def remove(self, sha256: str, changed_before: float) -> int:
        """Remove the blob unless it changed (was put or touched) at or after
        ``changed_before`` (Unix time); the bytes freed (0: it stays, or was gone)."""
        ...

    def blobs(self) -> Iterator[tuple[str, float]]:
        """Each kept blob (hex) and when it last changed (Unix time), for the collection."""
        ...


def blob_store(settings: Settings) -> BlobStore:
    """The store the settings name: S3 when GPUPOOL_DATASETS_S3_ENDPOINT is set, else the
    POSIX directory. DatasetStoreUnavailable when S3 is asked for but boto3 is missing or
    the bucket is not set (the server checks it as it starts)."""
    if not settings.datasets_s3_endpoint:
        return PosixStore(settings.datasets_dir)
    return _s3_store(
        settings.datasets_s3_endpoint,
        settings.datasets_s3_bucket,
        settings.datasets_s3_prefix,
        settings.datasets_s3_region,
    )


def s3_of(settings: Settings) -> dict[str, str] | None:
    """What a node needs to fetch blobs from the S3 store (no credentials: the node's own
    AWS chain has them), None for the POSIX store."""
    if not settings.datasets_s3_endpoint:
        return None
    return {
        "endpoint": settings.datasets_s3_endpoint,
        "bucket": settings.datasets_s3_bucket,
        "prefix": settings.datasets_s3_prefix,
        "region": settings.datasets_s3_region,
    }


# -- POSIX -------------------------------------------------------------------------------------


class PosixStore:
    """Blobs as read-only (0444) files below a directory: nodes hard-link them into their
    caches. A put is an fsynced rename and a synced directory; a removal renames the blob
    below ``incoming`` first and looks at it there, so that an upload touching it at once
    either has it put back or finds it gone and keeps its own."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / blob_key(sha256)

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def put(self, sha256: str, path: Path) -> None:
        final = self.path(sha256)
        try:
            os.utime(final)  # kept already: the same bytes, touched
            return
        except FileNotFoundError:  # not kept, or taken by a collection a moment ago
            pass
        except OSError as error:
            raise disk_error(error) from error
        try:
            final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(path, 0o444)
            os.replace(path, final)
            fd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            raise disk_error(error) from error

    def open(self, sha256: str) -> BinaryIO | None:
        try:
            return self.path(sha256).open("rb")
        except FileNotFoundError:
            return None

    def size(self, sha256: str) -> int | None:
        try:
            return self.path(sha256).stat().st_size
        except FileNotFoundError:
            return None

    def remove(self, sha256: str, changed_before: float) -> int:
        final = self.path(sha256)
        taken = self.root / INCOMING / f"collected-{sha256}"
        try:
            taken.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.rename(final, taken)
        except FileNotFoundError:
            return 0
        stat = os.lstat(taken)
        if stat.st_mtime >= changed_before:
            os.replace(taken, final)  # kept again meanwhile: it stays
            return 0
        os.unlink(taken)
        return stat.st_blocks * 512

    def blobs(self) -> Iterator[tuple[str, float]]:
        root = self.root / BLOBS
        try:
            shards = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return
        for shard in shards:
            with contextlib.suppress(FileNotFoundError), os.scandir(shard.path) as entries:
                for entry in entries:
                    if len(entry.name) == 64 and entry.name.startswith(shard.name):
                        with contextlib.suppress(FileNotFoundError):
                            yield entry.name, entry.stat(follow_symlinks=False).st_mtime


def disk_error(error: OSError) -> Exception:
    """StorageFull for a full disk (507: the client may try again later); other errors as
    they are (an operator's problem: the server's log has them)."""
    import errno

    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull()
    return RuntimeError(f"dataset storage failed: {error}")


# -- S3 ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _s3_store(endpoint: str, bucket: str, prefix: str, region: str) -> S3Store:
    # one client per store (boto3's clients are thread-safe; making one takes a while)
    return S3Store(endpoint, bucket, prefix, region)


class S3Store:
    """Blobs as objects of an S3-compatible store, ``<prefix>blobs/<2 hex>/<hex>``. S3 has
    no rename, so a put uploads the checked file (a multipart upload past boto3's
    threshold), and a touch copies the object onto itself (its LastModified is then now,
    no byte sent; past S3's 5 GiB limit of one copy, the file is uploaded again), then
    looks that it is still there (a collection may have deleted it meanwhile: it is then
    uploaded). A removal looks at the object's LastModified just before it deletes it. S3
    has no conditional delete to close what is left: a collection whose look and delete
    straddle an upload's touch and its look after it. That takes a blob no version
    referenced and no team held for the whole grace period (a day), and an upload of the
    very same bytes within one request of its deletion; the version then lacks the blob,
    and its jobs fail naming it (upload it again to mend it)."""

    def __init__(self, endpoint: str, bucket: str, prefix: str, region: str) -> None:
        if not bucket:
            raise DatasetStoreUnavailable(
                f"GPUPOOL_DATASETS_S3_ENDPOINT is {endpoint} but GPUPOOL_DATASETS_S3_BUCKET "
                "is not set: name the bucket the dataset store keeps its blobs in"
            )
        self.client = s3_client(endpoint, region)
        self.endpoint, self.bucket, self.prefix = endpoint, bucket, prefix

    def key(self, sha256: str) -> str:
        return f"{self.prefix}{blob_key(sha256)}"

    def _head(self, sha256: str) -> dict[str, Any] | None:
        with self._errors():
            try:
                return self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
            except self.client.exceptions.ClientError as error:
                if _not_found(error):
                    return None
                raise

    def has(self, sha256: str) -> bool:
        return self._head(sha256) is not None

    def put(self, sha256: str, path: Path) -> None:
        key = self.key(sha256)
        with self._errors():
            head = self._head(sha256)
            if head is not None and int(head["ContentLength"]) <= MAX_COPY_BYTES:
                self.client.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    CopySource={"Bucket": self.bucket, "Key": key},
                    MetadataDirective="REPLACE",
                    Metadata={"touched": datetime.now().isoformat()},
                )
                if self._head(sha256) is not None:
                    return
            self.client.upload_file(str(path), self.bucket, key)

    def open(self, sha256: str) -> BinaryIO | None:
        with self._errors():
            try:
                answer = self.client.get_object(Bucket=self.bucket, Key=self.key(sha256))
            except self.client.exceptions.ClientError as error:
                if _not_found(error):
                    return None
                raise
        return answer["Body"]

    def size(self, sha256: str) -> int | None:
        head = self._head(sha256)
        return None if head is None else int(head["ContentLength"])

    def remove(self, sha256: str, changed_before: float) -> int:
        head = self._head(sha256)
        if head is None or head["LastModified"].timestamp() >= changed_before:
            return 0
        with self._errors():
            self.client.delete_object(Bucket=self.bucket, Key=self.key(sha256))
        return int(head["ContentLength"])

    def blobs(self) -> Iterator[tuple[str, float]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}{BLOBS}/"
        )
        with self._errors():
            for page in pages:
                for item in page.get("Contents", ()):
                    name = item["Key"].rsplit("/", 1)[-1]
                    if len(name) == 64:
                        yield name, item["LastModified"].timestamp()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """The store's failures (it does not answer, refuses the credentials) as
        DatasetStoreUnavailable (503), naming the store."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as error:
            raise DatasetStoreUnavailable(
                f"the dataset store s3://{self.bucket}/{self.prefix} at {self.endpoint} "
                f"failed: {error}; check that it answers and the server's AWS credentials, "
                "then try again"
            ) from error


def s3_client(endpoint: str, region: str) -> Any:
    """A boto3 S3 client for ``endpoint`` (credentials: the AWS chain of this account);
    DatasetStoreUnavailable naming the extra when boto3 is not installed."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise DatasetStoreUnavailable(
            "GPUPOOL_DATASETS_S3_ENDPOINT is set but boto3 is not installed: install "
            "gpupool with its s3 extra (pip install 'gpupool[s3]'), or unset it to keep "
            "datasets in GPUPOOL_DATASETS_STORE"
        ) from None
    config = Config(
        retries={"max_attempts": 3, "mode": "standard"}, s3={"addressing_style": "path"}
    )
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=region, config=config
    )


def _not_found(error: Any) -> bool:
    code = str(error.response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")
