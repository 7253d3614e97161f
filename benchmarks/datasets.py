"""Datasets: what a cached version adds to a job's start, a cold fetch against cp, and what a
version that changes 1 % of its files uploads.

Upload: a tree of FILES files of MEGABYTES in all (incompressible) is made a dataset through
the client library (scan, manifest, missing blobs, upload, commit) against one real server;
then 1 % of its files are rewritten and it is sent again. Aim: the second upload sends
<= 2 % of the bytes (the changed files and the manifest).

Warm start: a first job reading the version materialises it on the node (its runner, reason
DatasetFetching: the cold start, shown); then trivial jobs are submitted one after the
other, alternately without the dataset and with it, and each job's runner-recorded start
minus its acknowledged submit is taken. Aim: a cached 1 GB / 100,000-file version adds
<= 200 ms at p50 (the default size; smaller with --files and --megabytes).

Cold fetch: the version is materialised again by ``runner.datasets`` into a directory on
another file system (/dev/shm: links cannot cross, so every file is copied), against
``cp -r`` of the same tree (the node's cached copy: the same files) to the same place, three
times in alternating order, medians. Aim: >= 80 % of cp's throughput.

    .venv/bin/python benchmarks/datasets.py [--files N] [--megabytes M] [--jobs J]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from harness import FINAL, client, percentile, start_server, stop_on_sigterm, wait_until

from gpupool.client import Client
from gpupool.client import datasets as uploads
from gpupool.runner import datasets as cache

FILES = 100_000
MEGABYTES = 1024
JOBS = 20
ROUNDS = 3  # of the cold fetch against cp


def make_tree(root: Path, files: int, megabytes: int) -> list[Path]:
    """``files`` files of random bytes, ``megabytes`` in all, 1,000 to a directory."""
    size = max(1, megabytes * 2**20 // files)
    made = []
    for index in range(files):
        path = root / f"d{index // 1000:04}" / f"f{index:06}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        made.append(path)
    return made


def starts(api, jobs: int) -> tuple[list[float], list[float]]:  # noqa: ANN001
    """Submit -> start of trivial jobs without and with the dataset, alternately."""
    plain, reading = [], []
    for index in range(2 * jobs):
        body: dict[str, object] = {"command": ["true"]}
        if index % 2:
            body["datasets"] = ["bench"]
        done = ended(api, api.post("/jobs", json=body).json()["id"])
        assert done["status"] == "succeeded", done
        (reading if index % 2 else plain).append(done["started_at"] - done["submitted_at"])
    return plain, reading


def ended(api, job_id: int) -> dict:  # noqa: ANN001
    found: dict = {}

    def check() -> bool:
        found.update(api.get(f"/jobs/{job_id}").json())
        return found["status"] in FINAL

    wait_until(check, 3600)
    return found


def cold_fetch(server_data: Path, manifest: str, rounds: int = ROUNDS) -> tuple[float, float]:
    """Median seconds to materialise the version on another file system, and to cp -r the
    same tree (the node's cached copy of it: links to the same blobs, so both read the same
    files), in ``rounds`` rounds that alternate which goes first (the machine's load and its
    page cache favour neither)."""
    store = str(server_data / "datasets")
    source = server_data / "dataset-cache" / manifest
    fetched, copied = [], []
    for index in range(rounds):
        base = Path(tempfile.mkdtemp(prefix="gpupool-bench-fetch-", dir="/dev/shm"))
        try:

            def fetch(base: Path = base) -> None:
                start = time.perf_counter()
                cache.materialise(manifest, store, str(base / "cache" / manifest))
                fetched.append(time.perf_counter() - start)

            def cp(base: Path = base) -> None:
                start = time.perf_counter()
                subprocess.run(["cp", "-r", str(source), str(base / "cp")], check=True)
                copied.append(time.perf_counter() - start)

            for step in (fetch, cp) if index % 2 == 0 else (cp, fetch):
                step()
        finally:
            cache.remove_tree(str(base))
            shutil.rmtree(base, ignore_errors=True)
    return statistics.median(fetched), statistics.median(copied)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=FILES)
    parser.add_argument("--megabytes", type=int, default=MEGABYTES)
    parser.add_argument("--jobs", type=int, default=JOBS)
    args = parser.parse_args()
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="gpupool-bench-datasets-"))
    server = start_server()
    try:
        tree = work / "tree"
        files = make_tree(tree, args.files, args.megabytes)

        def connect() -> Client:
            return Client(server.url, server.token, timeout=3600)

        upload = connect()
        start = time.perf_counter()
        first = uploads.send(upload, "bench", uploads.scan(tree), connect=connect)
        took = time.perf_counter() - start
        changed = files[:: max(1, len(files) // max(1, len(files) // 100))][: len(files) // 100]
        for path in changed:
            path.write_bytes(os.urandom(path.stat().st_size))
        second = uploads.send(upload, "bench", uploads.scan(tree), connect=connect)
        upload.close()
        with client(server) as api:
            cold = ended(
                api,
                api.post("/jobs", json={"command": ["true"], "datasets": ["bench"]}).json()["id"],
            )
            plain, reading = starts(api, args.jobs)
        manifest = second.version["manifest"].removeprefix("sha256:")
        fetched, copied = cold_fetch(server.data_dir, manifest)

        total = first.total_bytes / 2**20
        print(
            f"dataset: {len(files):,} files, {total:.0f} MiB; first upload {took:.1f} s "
            f"({total / took:.0f} MiB/s), {first.uploaded_blobs:,} blobs"
        )
        share = second.uploaded_bytes / second.total_bytes
        print(
            f"1 % of the files changed ({len(changed):,}): uploaded {second.uploaded_bytes:,} of "
            f"{second.total_bytes:,} bytes = {100 * share:.2f} % (aim <= 2 %)"
        )
        first_start = cold["started_at"] - cold["submitted_at"]
        print(f"first job on the node (materialises it): {first_start:.2f} s submit -> start")
        for name, values in (("no dataset", plain), ("cached dataset", reading)):
            p50, p90 = (1000 * percentile(values, q) for q in (50, 90))
            print(f"submit -> start, {name:14}: p50 {p50:6.1f} ms  p90 {p90:6.1f} ms")
        added = 1000 * (percentile(reading, 50) - percentile(plain, 50))
        print(f"added by a cached version at p50: {added:+.1f} ms (aim <= 200 ms)")
        print(
            f"cold fetch to another file system {fetched:.2f} s vs cp -r {copied:.2f} s "
            f"(medians of {ROUNDS}): "
            f"{100 * copied / fetched:.0f} % of cp's throughput (aim >= 80 %)"
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
