"""kill -9 of the server during a dataset upload: every blob it acknowledged is kept and
usable after a restart; the one it was receiving is not, and leaves nothing behind."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from gpupool.domain.datasets import ManifestFile, manifest_bytes
from tests.support.server import ServerProcess


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def api(server: ServerProcess) -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.token}"}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, timeout=30)


def test_acknowledged_blobs_survive_kill_9_and_a_cut_upload_leaves_nothing(
    tmp_path: Path,
) -> None:
    kept = {"a.bin": os.urandom(300_000), "b.bin": os.urandom(1000)}
    cut = os.urandom(4 * 2**20)
    server = ServerProcess(tmp_path / "data").start()
    try:
        with api(server) as client:
            for data in kept.values():
                assert client.put(f"/dataset-blobs/{sha(data)}", content=data).status_code == 200
            receiving = threading.Event()

            def slowly() -> Iterator[bytes]:
                yield cut[: 2**20]
                receiving.set()
                time.sleep(30)  # the server is killed meanwhile
                yield cut[2**20 :]

            def send() -> None:
                try:
                    with api(server) as other:
                        other.put(f"/dataset-blobs/{sha(cut)}", content=slowly())
                except httpx.HTTPError:
                    pass  # the server went away

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            assert receiving.wait(30)
            time.sleep(0.5)  # its first MiB on the server's side
        server.kill9()
        server.start()
        with api(server) as client:
            files = [ManifestFile(p, len(d), 0o644, sha(d)) for p, d in kept.items()]
            manifest = manifest_bytes(files)
            assert client.put(f"/dataset-blobs/{sha(manifest)}", content=manifest).is_success
            made = client.post("/datasets/kept/versions", json={"manifest": sha(manifest)})
            assert made.status_code == 201, made.text
            with_cut = manifest_bytes([*files, ManifestFile("c.bin", len(cut), 0o644, sha(cut))])
            client.put(f"/dataset-blobs/{sha(with_cut)}", content=with_cut)
            refused = client.post("/datasets/cut/versions", json={"manifest": sha(with_cut)})
            assert refused.status_code == 409, refused.text
            assert refused.json()["error"]["details"]["missing"] == [sha(cut)]
        store = server.data_dir / "datasets"
        for data in kept.values():
            assert (store / "blobs" / sha(data)[:2] / sha(data)).read_bytes() == data
        assert not (store / "blobs" / sha(cut)[:2] / sha(cut)).exists()
        assert list((store / "incoming").glob("*.part")) == []
    finally:
        server.stop()
