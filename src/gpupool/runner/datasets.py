"""A node's cache of dataset versions, filled by the runner before its job starts: each
version materialised once, read-only, shared by the jobs that read it.

A version is the tree its manifest lists, made at ``path`` (the node's cache, then the
manifest's hex digits): each file a hard link to its blob in the dataset store (the same
file system: no byte copied), or a copy where a link cannot be made (another file system, a
store on NFS) or where the file is executable (a blob is kept 0444, and its links share its
mode). Files are 0444 (0555 executable), directories 0555. The tree is built in a private
``.part`` directory and renamed into place when whole, under a lock per version, so that
jobs starting at once on the node build it once and none sees half of it; a part left by a
crash is removed by the next build.

It runs in the runner, not in the executor's start, so that a big version is materialised
without holding up other jobs' starts: the job is ``starting`` with reason
``DatasetFetching`` meanwhile, and the message says how far it is (the ``progress`` file,
as for an environment's build). The sandbox then shows the version read-only at the job's
mount path (``SandboxPolicy.mounts``).

A job holds each of its versions (a shared lock on ``.<hex>.lock`` beside it) from before it
starts to its end, and touches the lock file (its last use). Past the admin's limit
(``cache_max_bytes``, GPUPOOL_DATASET_CACHE_MAX_BYTES), after a version is materialised, the
least recently used versions no job holds are removed (``runner.lru``): each renamed away to
a dot name first, so that a directory named by a manifest's hex is always a whole version.

With an S3-compatible store (the use's ``s3``), the version's manifest and blobs are first
fetched into ``.fetch-<hex>`` beside it (a dot name: neither a version nor a holding) by
``gpupool.executors.blobfetch``, a process spawned with this interpreter (so that the runner
imports nothing beyond the stdlib; it uses the node's own AWS credentials), then linked from
there exactly as from a POSIX store, and the fetched blobs are removed once the version is
whole: its files are hard links to them, so their bytes stay, counted once, in the version
alone, and a collection of the version frees them with it (no second cache to collect).
What this costs: a blob two versions share is fetched once for each. A fetch a crash cut
short is removed by the next build of its version, or by the next collection (``collect``).

Imported only for jobs that read datasets (stdlib only).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from gpupool.runner import lru
from gpupool.runner.layout import CODE_RUNNER_ERROR, PROGRESS_FILE, atomic_write_json

REASON = "DatasetFetching"
SAY_EVERY_SECONDS = 0.5
LOCK_POLL_SECONDS = 0.05
RECENT_SECONDS = 60.0  # a version used this recently is not collected
_VERSION = re.compile(r"[0-9a-f]{64}")  # a version's directory: its manifest's hex


class Missing(Exception):
    """A blob or the manifest of a version is not in the dataset store."""


class Stopped(Exception):
    """The job was asked to stop while its datasets were being materialised."""


def ensure(datasets, attempt_dir: str, stopped, log=None):  # noqa: ANN001, ANN201
    """Have every version of ``datasets`` (spec.json's, ``wire.DatasetSpec``) in the node's
    cache: (None, the descriptors of their locks, held shared while the job runs so that no
    collection removes them: close them when the attempt ends), or ((exit code, message),
    []) for the attempt's record. ``stopped()``: whether the job was asked to stop; ``log``:
    the job's log, told what a collection past the cache's limit removed."""
    progress = _Progress(attempt_dir)
    held: list[int] = []
    try:
        made = False
        for use in datasets:
            fd, built = _hold(use, stopped, progress)
            held.append(fd)
            made = made or built
        limit = max((use.cache_max_bytes for use in datasets), default=0)
        if made and limit:
            cache = os.path.dirname(datasets[0].path)
            progress.say(f"collecting this node's dataset cache past {lru.size(limit)}")
            said = collect(cache, limit)
            if said and log is not None:
                log.note(said)
        return None, held
    except BaseException as problem:
        for fd in held:
            os.close(fd)
        if isinstance(problem, Stopped):
            return (128 + signal.SIGTERM, "stopped while its datasets were being materialised"), []
        if isinstance(problem, Missing):
            return (
                CODE_RUNNER_ERROR,
                f"a dataset is missing from the dataset store: {problem}",
            ), []
        if isinstance(problem, OSError):
            message = f"a dataset could not be materialised on this node: {problem}"
            return (CODE_RUNNER_ERROR, message), []
        raise
    finally:
        progress.clear()


def _hold(use, stopped, progress) -> tuple[int, bool]:  # noqa: ANN001
    """The version's lock, held shared, once the version is in the cache (made here when it
    is not: True); its last use touched."""
    fd = _open_lock(use.path)
    try:
        made = False
        say = None
        while True:
            if not lru.try_lock(fd, fcntl.LOCK_SH):  # being made, or collected
                say = say or progress.for_(use.label)
                say("waiting for another job of this node to materialise it")
                lru.wait_lock(fd, fcntl.LOCK_SH, stopped, LOCK_POLL_SECONDS, Stopped)
            if os.path.isdir(use.path):
                os.utime(fd)  # its last use: a collection takes the least recently used first
                return fd, made
            fcntl.flock(fd, fcntl.LOCK_UN)
            say = say or progress.for_(use.label)
            _make(fd, use.manifest, use.store, use.path, stopped, say, use.s3)
            made = True
            # back to shared: not atomic, but the touch keeps collections off it meanwhile
    except BaseException:
        os.close(fd)
        raise


def materialise(manifest: str, store: str, path: str, stopped=None, say=None, s3=None) -> None:  # noqa: ANN001
    """The version whose manifest is the blob ``manifest`` of ``store`` (of the S3 store
    ``s3`` when given), made at ``path`` unless it is there (then nothing is done). Missing
    when the store lacks part of it."""
    if os.path.isdir(path):
        return
    fd = _open_lock(path)
    try:
        _make(fd, manifest, store, path, stopped, say, s3)
    finally:
        os.close(fd)


def _make(fd: int, manifest: str, store: str, path: str, stopped, say, s3=None) -> None:  # noqa: ANN001
    """Make the version under its lock ``fd`` (taken exclusive here, and left so), unless
    another job of the node made it while this one waited; its last use touched."""
    _lock(fd, stopped, say)
    if not os.path.isdir(path):
        part = f"{path}.part"
        remove_tree(part)
        if s3 is None:
            _build(store, _files(store, manifest), part, stopped, say)
        else:
            fetched = _fetch_dir(path)
            remove_tree(fetched)  # a crash's leftovers
            try:
                fetch(s3, manifest, fetched, stopped, say)
                _build(fetched, _files(fetched, manifest), part, stopped, say)
            finally:
                remove_tree(fetched)
        os.rename(part, path)
    os.utime(fd)


def _fetch_dir(path: str) -> str:
    """Where the blobs of the version kept at ``path`` are fetched: beside it, a dot name."""
    return os.path.join(os.path.dirname(path), f".fetch-{os.path.basename(path)}")


def fetch(s3: dict, manifest: str, into: str, stopped=None, say=None) -> None:  # noqa: ANN001
    """The manifest and blobs of a version fetched from the S3 store ``s3`` below ``into``
    (the POSIX store's layout) by ``gpupool.executors.blobfetch``, what it says passed on;
    Missing when the store lacks part of it, Stopped when the job is asked to stop, OSError
    for any other failure (its message in the job's record)."""
    os.makedirs(into, mode=0o700, exist_ok=True)
    argv = [sys.executable, "-m", "gpupool.executors.blobfetch", "--manifest", manifest]
    argv += ["--into", into]
    for name in ("endpoint", "bucket", "prefix", "region"):
        argv += [f"--{name}", s3[name]]
    with open(os.path.join(into, "errors"), "w+b") as errors:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, close_fds=True
        )
        try:
            _follow(proc, stopped, say)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
        errors.seek(0)
        told = errors.read().decode(errors="replace").strip().splitlines()
    last = told[-1] if told else f"exit code {proc.returncode}"
    if proc.returncode == 3:  # blobfetch.EXIT_MISSING
        raise Missing(last)
    if proc.returncode != 0:
        raise OSError(errno.EIO, last)


def _follow(proc: subprocess.Popen, stopped, say) -> None:  # noqa: ANN001
    """Pass the fetch's progress lines on (at most every SAY_EVERY_SECONDS), until it ends;
    Stopped (the fetch killed) when the job is asked to stop."""
    import selectors

    said = 0.0
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        buffered = b""
        while True:
            if stopped is not None and stopped():
                raise Stopped
            if not selector.select(LOCK_POLL_SECONDS * 4):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            if lines and say is not None and time.monotonic() - said > SAY_EVERY_SECONDS:
                say(f"fetching from the dataset store: {lines[-1].decode(errors='replace')}")
                said = time.monotonic()


def collect(cache: str, max_bytes: int, now: float | None = None) -> str:
    """Bring what the node's cache of versions takes under ``max_bytes``: remove the least
    recently used version no job holds (nor used in the last minute) until under. What it
    did, or '' when the cache was not over. The fetches a crash cut short go first."""
    sweep_fetches(cache)
    total = lru.usage(cache)
    if total <= max_bytes:
        return ""
    kept = [
        (lru.used_at(_lock_path(os.path.join(cache, name))), name)
        for name in os.listdir(cache)
        if _VERSION.fullmatch(name) and os.path.isdir(os.path.join(cache, name))
    ]

    def remove(name: str) -> None:
        # renamed away first: a directory at a version's name is a whole version
        gone = os.path.join(cache, f".{name}.gone")
        remove_tree(gone)
        os.rename(os.path.join(cache, name), gone)
        remove_tree(gone)

    def open_lock(name: str) -> int:
        return _open_lock(os.path.join(cache, name))

    removed, total = lru.collect(
        cache, max_bytes, kept, open_lock, remove, recent=RECENT_SECONDS, now=now
    )
    listed = ", ".join(name[:12] for name in removed)
    what = f"removed {len(removed)} unused version(s) ({listed})" if removed else "none unused"
    still = "" if total <= max_bytes else " (still over: the rest is in use)"
    return (
        f"dataset versions on this node past {lru.size(max_bytes)}: {what}; "
        f"{lru.size(total)} now{still}"
    )


def sweep_fetches(cache: str) -> None:
    """Remove what a runner killed while it fetched a version from an S3 store left
    (``.fetch-<hex>``): each one whose version's lock is free (a fetch holds it exclusive)."""
    for name in os.listdir(cache):
        version = name.removeprefix(".fetch-")
        if version == name or not _VERSION.fullmatch(version):
            continue
        fd = _open_lock(os.path.join(cache, version))
        try:
            if lru.try_lock(fd, fcntl.LOCK_EX):
                remove_tree(os.path.join(cache, name))
        finally:
            os.close(fd)


def _lock_path(path: str) -> str:
    """The lock file of the version kept at ``path``: beside it, a dot file."""
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")


def _open_lock(path: str) -> int:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    return os.open(_lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def remove_tree(path: str) -> None:
    """Remove a (read-only) tree, as far as it exists."""
    if not os.path.lexists(path):
        return
    for directory, _names, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def blob_path(store: str, sha256: str) -> str:
    """As ``gpupool.domain.datasets.blob_relpath`` lays the store out."""
    return os.path.join(store, "blobs", sha256[:2], sha256)


def _files(store: str, manifest: str) -> list[tuple[str, int, str]]:
    """(path, mode, sha256) of each file, checked to stay inside the version (the server
    checked the manifest when it was committed; the store is not trusted twice)."""
    try:
        with open(blob_path(store, manifest), "rb") as file:
            raw = json.load(file)
    except FileNotFoundError:
        raise Missing(f"the manifest {manifest} is not in {store}") from None
    found = []
    for entry in raw.get("files") or []:
        path, mode, sha = entry.get("path"), entry.get("mode"), entry.get("sha256")
        parts = path.split("/") if isinstance(path, str) else [""]
        if path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in path:
            raise Missing(f"the manifest {manifest} names a path outside its version")
        if not isinstance(sha, str) or len(sha) != 64 or not isinstance(mode, int):
            raise Missing(f"the manifest {manifest} is malformed")
        found.append((path, mode, sha))
    return found


def _build(store: str, files: list[tuple[str, int, str]], root: str, stopped, say) -> None:  # noqa: ANN001
    os.mkdir(root, 0o755)
    made = {root}
    said = time.monotonic()
    for done, (relative, mode, sha) in enumerate(files):
        target = os.path.join(root, relative)
        parent = os.path.dirname(target)
        if parent not in made:
            os.makedirs(parent, mode=0o755, exist_ok=True)
            made.add(parent)
        source = blob_path(store, sha)
        executable = bool(mode & 0o111)
        try:
            if executable or not _link(source, target):
                _copy(source, target, 0o555 if executable else 0o444)
        except FileNotFoundError:
            raise Missing(f"the blob {sha} of {relative} is not in {store}") from None
        if time.monotonic() - said > SAY_EVERY_SECONDS:
            if stopped is not None and stopped():
                raise Stopped
            if say is not None:
                say(f"{done:,} of {len(files):,} files")
            said = time.monotonic()
    for directory, _names, _files in os.walk(root, topdown=False):
        os.chmod(directory, 0o555)


def _copy(source: str, target: str, mode: int) -> None:
    """A copy of the blob made with ``mode`` (no chmod after): the kernel copies the bytes
    (copy_file_range, sendfile where it cannot), as few calls per file as can be."""
    fd_in = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd_in).st_size
        fd_out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            done = 0
            while done < size:
                try:
                    copied = os.copy_file_range(fd_in, fd_out, size - done)
                except OSError as error:
                    if error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    copied = os.sendfile(fd_out, fd_in, done, size - done)
                if copied == 0:
                    break
                done += copied
            os.fchmod(fd_out, mode)  # as asked, whatever the umask
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _link(source: str, target: str) -> bool:
    """A hard link to the blob; False where the file system refuses one (EXDEV: another
    file system; EPERM: a store whose files this account may not link)."""
    try:
        os.link(source, target)
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            return False
        raise
    return True


def _lock(fd: int, stopped, say) -> None:  # noqa: ANN001
    if lru.try_lock(fd, fcntl.LOCK_EX):
        return
    if say is not None:
        say("waiting for another job of this node to materialise it")
    lru.wait_lock(fd, fcntl.LOCK_EX, stopped or (lambda: False), LOCK_POLL_SECONDS, Stopped)


class _Progress:
    """The attempt's ``progress`` file: what its runner is doing before the job starts."""

    def __init__(self, attempt_dir: str) -> None:
        self.path = os.path.join(attempt_dir, PROGRESS_FILE)

    def for_(self, label: str):  # noqa: ANN202 - a say(message) function
        def say(message: str) -> None:
            self.say(f"materialising dataset {label} on this node: {message}")

        say("starting")
        return say

    def say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            atomic_write_json(self.path, {"reason": REASON, "message": text}, durable=False)

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
