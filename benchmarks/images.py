"""Container images: what running in one adds to submit -> start, and a cold pull.

Warm: one real server (isolation on, every job in its sandbox) holds a small image already
pulled; trivial jobs are submitted one after the other, alternately without an image and in
it, and each job's runner-recorded start minus its acknowledged submit is taken. The image's
tree is unpacked once per node at pull, so a warm start only adds the binds of its root.
Aim: <= 50 ms added at p50.

Cold: an image of ~200 MB over four layers of incompressible files is pushed to a registry
on 127.0.0.1 (not timed), then pulled through the API: skopeo's copy into the store plus
umoci's rootless unpack. Its rate gives what 1 GB takes (aim: <= 60 s). For the choice of
format, the same tree is also packed with mksquashfs and read back through squashfuse, beside
a read of the unpacked tree.

    .venv/bin/python benchmarks/images.py [--jobs N] [--megabytes M]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path

from harness import FINAL, client, percentile, scratch, start_server, stop_on_sigterm, wait_until
from tests.support.images import ImageConfig, Member, Registry, base_members, layer

JOBS = 40
MEGABYTES = 200
FILE_BYTES = 256 * 1024


def warm(api, ref: str, jobs: int) -> tuple[list[float], list[float]]:  # noqa: ANN001
    """Submit -> start of trivial jobs without and with the image, alternately."""
    plain, imaged = [], []
    for index in range(2 * jobs):
        body: dict[str, object] = {"command": ["true"]}
        if index % 2:
            body |= {"image": ref, "command": ["true"]}
        done = _ended(api, api.post("/jobs", json=body).json()["id"])
        assert done["status"] == "succeeded", done
        (imaged if index % 2 else plain).append(done["started_at"] - done["submitted_at"])
    return plain, imaged


def _ended(api, job_id: int) -> dict:  # noqa: ANN001
    found: dict = {}

    def ended() -> bool:
        found.update(api.get(f"/jobs/{job_id}").json())
        return found["status"] in FINAL

    wait_until(ended, 60)
    return found


def big_layers(megabytes: int) -> list[bytes]:
    """Four layers of incompressible files, ``megabytes`` in all."""
    per_layer = megabytes * 1024 * 1024 // 4 // FILE_BYTES
    return [
        layer(
            [Member(f"data/{n}", "dir", mode=0o755)]
            + [Member(f"data/{n}/f{i}", data=os.urandom(FILE_BYTES)) for i in range(per_layer)]
        )
        for n in range(4)
    ]


def read_all(root: Path) -> float:
    """Seconds to read every file below ``root``."""
    start = time.perf_counter()
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                while f.read(1 << 20):
                    pass
    return time.perf_counter() - start


def squashfs_row(rootfs: Path, work: Path) -> str:
    """mksquashfs of the unpacked tree, then a read of it through squashfuse."""
    if not (shutil.which("mksquashfs") and shutil.which("squashfuse")):
        return "squashfs: mksquashfs or squashfuse missing, not measured"
    image, mount = work / "image.sqfs", work / "mnt"
    mount.mkdir()
    start = time.perf_counter()
    subprocess.run(
        ["mksquashfs", str(rootfs), str(image), "-quiet", "-no-progress", "-noappend"], check=True
    )
    packed = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run(["squashfuse", str(image), str(mount)], check=True)
    mounted = time.perf_counter() - start
    try:
        through_fuse = read_all(mount)
    finally:
        unmount = shutil.which("fusermount3") or shutil.which("fusermount")
        subprocess.run([*([unmount, "-u"] if unmount else ["umount"]), str(mount)], check=False)
    return (
        f"squashfs: mksquashfs {packed:.1f} s (after the unpack), squashfuse mount "
        f"{1000 * mounted:.0f} ms, read of every file {through_fuse:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--megabytes", type=int, default=MEGABYTES)
    args = parser.parse_args()
    stop_on_sigterm()
    work = scratch("gpupool-bench-images-")
    registry = Registry(work / "registry").start()
    server = start_server({"GPUPOOL_IMAGE_REGISTRIES": f"{registry.host}=insecure"})
    try:
        small = registry.push("bench/small", [layer(base_members())], ImageConfig())
        big = registry.push("bench/big", [layer(base_members()), *big_layers(args.megabytes)])
        with client(server) as api:
            api.timeout = 3600
            assert api.post("/images/pull", json={"ref": small}).status_code == 201
            plain, imaged = warm(api, small, args.jobs)
            start = time.perf_counter()
            pulled = api.post("/images/pull", json={"ref": big})
            cold = time.perf_counter() - start
            assert pulled.status_code == 201, pulled.text
        size_mb = pulled.json()["size_bytes"] / 2**20
        for name, values in (("no image", plain), ("in an image", imaged)):
            p50, p90 = (1000 * percentile(values, q) for q in (50, 90))
            print(f"submit -> start, {name:12}: p50 {p50:6.1f} ms  p90 {p90:6.1f} ms")
        added = 1000 * (percentile(imaged, 50) - percentile(plain, 50))
        print(f"added by the image at p50: {added:+.1f} ms (aim <= 50 ms)")
        rate = size_mb / cold
        print(
            f"cold pull + unpack of {size_mb:.0f} MB: {cold:.1f} s ({rate:.0f} MB/s): "
            f"1 GB would take ~{1024 / rate:.0f} s (aim <= 60 s)"
        )
        digest = pulled.json()["digest"].removeprefix("sha256:")
        rootfs = server.data_dir / "images" / "roots" / digest / "rootfs"
        print(f"unpacked tree: read of every file {read_all(rootfs):.2f} s")
        print(squashfs_row(rootfs, work))
    finally:
        server.stop()
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
