"""An S3-protocol server on 127.0.0.1 for the S3 dataset store's tests.

No real S3 server can be installed here (MinIO is in no registry this project uses;
Debian's radosgw needs a Ceph cluster), so the tests run moto's standalone server
(``moto[server]``, the dev extra): a real HTTP server speaking the S3 protocol, which boto3
talks to over the loopback as it would to MinIO or AWS.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

# moto's fake credentials: what the server's (and a node's) AWS chain would hold
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAGPUPOOLTESTKEY01",
    "AWS_SECRET_ACCESS_KEY": "gpupool-test-secret-never-given-to-jobs",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    prefix: str = "gpupool/"

    def client(self):  # noqa: ANN201 - a boto3 client
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self) -> list[str]:
        """Every key of the bucket below the prefix's blobs."""
        pages = self.client().get_paginator("list_objects_v2")
        found = []
        for page in pages.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}blobs/"):
            found += [item["Key"] for item in page.get("Contents", ())]
        return sorted(found)

    def env(self) -> dict[str, str]:
        """A server process's environment that selects this store, with the credentials."""
        return {f"GPUPOOL_{k.upper()}": v for k, v in self.settings().items()} | CREDENTIALS

    def settings(self) -> dict[str, str]:
        """The server's settings that select this store."""
        return {
            "datasets_s3_endpoint": self.endpoint,
            "datasets_s3_bucket": self.bucket,
            "datasets_s3_prefix": self.prefix,
        }


@contextmanager
def moto_server(monkeypatch: pytest.MonkeyPatch | None = None) -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 (a free port) with a new bucket; with ``monkeypatch``,
    the AWS chain of this process holds its credentials (the environment) meanwhile
    (without, give a server process ``CREDENTIALS`` in its environment)."""
    from moto.server import ThreadedMotoServer

    if monkeypatch is not None:
        for name, value in CREDENTIALS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        found = S3Server(f"http://{host}:{port}", f"gpupool-{uuid.uuid4().hex[:8]}")
        found.client().create_bucket(Bucket=found.bucket)
        yield found
    finally:
        server.stop()
