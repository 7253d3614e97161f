"""How fast a job's outputs become a model version's archive, against copying the same files.

A registration packs the files (``gpupool.executors.outputs.pack``: one gzip tar, stored
blocks) and reads the archive back for each file's SHA-256 (``index``). Measured on a
directory of model-like files (incompressible weights plus a few small text files), written
just before, so every step reads them from the page cache alike (a cold disk slows each step
by the same reads). Printed: MiB/s of a plain copy (``shutil.copyfile`` of each file), of pack at
gzip level 0 (what gpupool does) and level 1 (deflate), of index, and the ratios.

    .venv/bin/python benchmarks/model_pack.py [MiB]      # default 256
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from gpupool.domain.code import CodeLimits
from gpupool.executors.outputs import index, pack

LIMITS = CodeLimits(1 << 40, 1 << 40, 1_000_000)


def outputs(root: Path, mib: int) -> Path:
    """Weights in files of 64 MiB at most, a config and a tokenizer."""
    (root / "model").mkdir(parents=True)
    left, part = mib << 20, 0
    while left > 0:
        size = min(left, 64 << 20)
        with open(root / "model" / f"weights-{part:03d}.bin", "wb") as file:
            file.write(os.urandom(size))
            os.fsync(file.fileno())
        left, part = left - size, part + 1
    (root / "model" / "config.json").write_text('{"layers": 24, "hidden": 1024}\n' * 100)
    (root / "model" / "vocab.txt").write_text("\n".join(f"token{i}" for i in range(50_000)))
    return root


def timed(action) -> float:  # noqa: ANN001 - a callable
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def copy_all(source: Path, dest: Path) -> None:
    for path in sorted(source.rglob("*")):
        if path.is_file():
            target = dest / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def pack_deflate(source: Path, dest: Path) -> None:
    """The same tar, deflated at level 1: the alternative gpupool does not take."""
    with (
        open(dest, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as zipped,
        tarfile.open(fileobj=zipped, mode="w|") as tar,
    ):
        tar.add(source, arcname="")


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-") as base:
        work = Path(base)
        source = outputs(work / "outputs", mib)
        copy_s = timed(lambda: copy_all(source, work / "copy"))
        archive = work / "version.tar.gz"
        with open(archive, "wb") as into:
            pack_s = timed(lambda: pack(source, "", LIMITS, into))
        index_s = timed(lambda: index(archive, LIMITS))
        size = archive.stat().st_size
        deflate_s = timed(lambda: pack_deflate(source, work / "deflated.tar.gz"))
        deflated = (work / "deflated.tar.gz").stat().st_size
    out = io.StringIO()
    print(f"{mib} MiB of model files", file=out)
    print(f"  plain copy          {mib / copy_s:8.0f} MiB/s", file=out)
    print(
        f"  pack (gzip level 0) {mib / pack_s:8.0f} MiB/s  archive {size / (mib << 20):.4f}x",
        file=out,
    )
    print(
        f"  pack (gzip level 1) {mib / deflate_s:8.0f} MiB/s  "
        f"archive {deflated / (mib << 20):.4f}x",
        file=out,
    )
    print(f"  index (SHA-256)     {mib / index_s:8.0f} MiB/s", file=out)
    print(
        f"  register = pack + index: {(pack_s + index_s) / copy_s:.1f}x a plain copy's time; "
        f"level 0 packs {deflate_s / pack_s:.1f}x faster than level 1",
        file=out,
    )
    print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
