"""A job's Python environment on its node: built once, then shown read-only (stdlib only).

spec.json's ``environment`` (``wire.EnvironmentSpec``) names an environment by its id and
says where it lives on this node. A registered prefix is there already. A locked environment
is built the first time a job on this node needs it, by the job's runner, before the job
starts:

1. the runner takes the environment's lock file (``<envs>/.locks/<hex>``): concurrent jobs
   of one environment wait for one build, and then all use it;
2. a directory left by a build that did not finish (no ``.gpupool-env.json``) is removed;
3. ``uv venv`` with the node's interpreter of that Python, then ``uv pip sync`` of the lock
   with ``--require-hashes`` (every file checked against the lock), hard links from uv's cache
   on the same file system (environments that share packages share their bytes), then the
   bytecode, compiled once per source file on the node and shared the same way
   (``runner.pycstore``); all inside a sandbox that shows the system read-only and only the
   environment, the caches and the lock writable, with all capabilities dropped. It runs no
   package's own code: wheels only, unless the admin allows source builds;
4. every file and directory of it made read-only, and ``.gpupool-env.json`` written last:
   its presence is what "built" means.

While it builds, the attempt's ``progress`` file says so (the executor reports it as the
job's reason, ``EnvBuilding``); a stop of the job kills the build; a build that fails ends
the attempt with the tail of uv's output.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time

from gpupool.runner import lru, sandbox
from gpupool.runner.layout import CODE_RUNNER_ERROR, PROGRESS_FILE, atomic_write_json
from gpupool.runner.lru import usage

MARKER = ".gpupool-env.json"
PYCSTORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pycstore.py")
REASON = "EnvBuilding"
POLL_SECONDS = 0.1
OUTPUT_TAIL = 20  # lines of uv's output kept in a failure's message
CACHES = ".cache"  # the lock of uv's cache and the bytecode: shared by builds, taken to clear
UV_CACHE = ".uv-cache"
PYC_STORE = ".pyc-store"
RECENT_SECONDS = 60.0  # an environment used this recently is not collected
READONLY_FILE = 0o444
READONLY_EXEC = 0o555


class Stopped(Exception):
    """The job was stopped while its environment was being built."""


def built(directory: str) -> dict[str, object] | None:
    """The marker of a built environment, or None when it is not (whole) there."""
    try:
        with open(os.path.join(directory, MARKER), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ensure(env, policy, attempt_dir: str, log, stopped):  # noqa: ANN001, ANN201
    """Have the environment ``env`` (``wire.EnvironmentSpec``) ready on this node: (None, the
    descriptor of its lock, held shared while the job runs: a collection never removes an
    environment in use; close it when the attempt ends), or ((exit code, message), None) for
    the attempt's record. ``policy``: the job's ``SandboxPolicy`` (None: unsandboxed);
    ``log``: the job's log; ``stopped()``: whether the job was asked to stop."""
    if env.prefix:
        if os.path.isdir(env.dir):
            return None, None
        return (
            CODE_RUNNER_ERROR,
            f"environment {env.name} is the prefix {env.dir}, which is not on this node: ask "
            "your admin to install it on every node, or use another environment",
        ), None
    fd = _open_lock(os.path.dirname(env.dir), os.path.basename(env.dir))
    progress = _Progress(attempt_dir)
    try:
        if not _try_lock(fd, fcntl.LOCK_SH):  # being built, or collected
            progress.say(f"waiting for environment {env.label} to be built on this node")
            _wait_lock(fd, fcntl.LOCK_SH, stopped)
        if built(env.dir) is None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            problem = _build_once(env, policy, attempt_dir, log, stopped, progress, fd)
            if problem is not None:
                os.close(fd)
                return problem, None
        os.utime(fd)  # its last use: a collection takes the least recently used first
        return None, fd
    except Stopped:
        os.close(fd)
        return (128 + signal.SIGTERM, "stopped while its environment was being built"), None
    except BaseException:
        os.close(fd)
        raise
    finally:
        progress.clear()


def _open_lock(root: str, name: str) -> int:
    """The lock file of environment ``name`` (or of the caches, ``.cache``) below ``root``."""
    path = os.path.join(root, ".locks", name)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _build_once(env, policy, attempt_dir, log, stopped, progress, fd) -> tuple[int, str] | None:  # noqa: ANN001
    """Build it under its lock (exclusive; shared again after), unless the job we waited
    for did; then collect what the node keeps past its limit."""
    root = os.path.dirname(env.dir)
    for cache in (env.cache, _pyc_store(env)):
        os.makedirs(cache, mode=0o700, exist_ok=True)
        os.chmod(cache, 0o700)  # the builds' alone, never shown to a job
    if not _try_lock(fd, fcntl.LOCK_EX):
        progress.say(f"waiting for environment {env.label} to be built on this node")
        _wait_lock(fd, fcntl.LOCK_EX, stopped)
    if built(env.dir) is not None:  # built by the job we waited for
        fcntl.flock(fd, fcntl.LOCK_SH)
        return None
    caches = _open_lock(root, CACHES)
    try:
        _wait_lock(caches, fcntl.LOCK_SH, stopped)  # not cleared while it builds from them
        started = time.monotonic()
        problem = _build(env, policy, attempt_dir, stopped, progress)
    finally:
        os.close(caches)
    if problem is not None:
        return problem
    log.note(f"environment {env.label} built on this node in {time.monotonic() - started:.1f} s")
    fcntl.flock(fd, fcntl.LOCK_SH)
    os.utime(fd)
    if env.max_bytes:
        progress.say(f"collecting environments past the node's {lru.size(env.max_bytes)}")
        said = collect(root, env.max_bytes, keep=os.path.basename(env.dir))
        if said:
            log.note(said)
    return None


def collect(root: str, max_bytes: int, keep: str = "", now: float | None = None) -> str:
    """Bring what the node's environments take (their files, uv's cache, the bytecode) under
    ``max_bytes``: remove the least recently used environment not in use (and not used in
    the last minute) until under, then clear uv's download cache if still over (what
    environments use of it stays: hard links). What it did, or '' when nothing was over."""
    total = usage(root)
    if total <= max_bytes:
        return ""

    def remove(name: str) -> None:
        path = os.path.join(root, name)
        _make_writable(path)
        shutil.rmtree(path, ignore_errors=True)
        _prune_bytecode(root)

    removed, total = lru.collect(
        root,
        max_bytes,
        _least_recently_used(root, keep),
        lambda name: _open_lock(root, name),
        remove,
        recent=RECENT_SECONDS,
        now=now,
    )
    removed = [name[:12] for name in removed]
    cleared = False
    if total > max_bytes:
        caches = _open_lock(root, CACHES)
        try:
            if _try_lock(caches, fcntl.LOCK_EX | fcntl.LOCK_NB):  # no build reads them now
                cache = os.path.join(root, UV_CACHE)
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache, mode=0o700, exist_ok=True)
                cleared = True
                _prune_bytecode(root)
                total = usage(root)
        finally:
            os.close(caches)
    done = (
        [f"removed {len(removed)} unused environment(s) ({', '.join(removed)})"] if removed else []
    )
    done += ["cleared uv's download cache"] if cleared else []
    still = "" if total <= max_bytes else " (still over: the rest is in use)"
    what = "; ".join(done) or "nothing could be removed"
    past = lru.size(max_bytes)
    return f"environments on this node past {past}: {what}; {lru.size(total)} now{still}"


def _least_recently_used(root: str, keep: str) -> list[tuple[float, str]]:
    found = []
    for name in os.listdir(root):
        if name.startswith(".") or name == keep or built(os.path.join(root, name)) is None:
            continue
        found.append((lru.used_at(os.path.join(root, ".locks", name)), name))
    return sorted(found)


def _prune_bytecode(root: str) -> None:
    """Bytecode no environment links to any more."""
    for directory, _dirs, files in os.walk(os.path.join(root, PYC_STORE)):
        for name in files:
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                if os.lstat(path).st_nlink == 1:
                    os.unlink(path)


def _build(env, policy, attempt_dir, stopped, progress) -> tuple[int, str] | None:  # noqa: ANN001
    if os.path.lexists(env.dir):  # a build that did not finish
        _make_writable(env.dir)
        shutil.rmtree(env.dir)
    os.makedirs(env.dir, mode=0o755)
    work = os.path.join(attempt_dir, "envbuild")
    os.makedirs(work, mode=0o700, exist_ok=True)
    lock_file = os.path.join(work, "lock.txt")
    with open(lock_file, "w", encoding="utf-8") as f:
        f.write(env.lock or "")
    output = os.path.join(work, "output.log")
    count = len([line for line in (env.lock or "").splitlines() if "==" in line])
    steps = [
        (
            f"building environment {env.label}: making it (Python {env.python_version})",
            [env.uv, "venv", "--no-config", "--quiet", "--python", env.python, env.dir],
        ),
        (
            f"building environment {env.label}: installing {count} packages",
            [
                env.uv,
                "pip",
                "sync",
                "--no-config",
                "--python",
                os.path.join(env.dir, "bin", "python"),
                "--require-hashes",
                "--link-mode",
                "hardlink",
                *env.index,
                lock_file,
            ],
        ),
    ]
    deadline = time.monotonic() + env.timeout
    for message, command in steps:
        progress.say(message)
        code = _run(env, policy, command, work, output, stopped, deadline)
        if code != 0:
            return CODE_RUNNER_ERROR, _failure(env, code, output)
    progress.say(f"building environment {env.label}: compiling its bytecode")
    python = os.path.join(env.dir, "bin", "python")
    for site in _site_packages(env.dir):
        command = [python, PYCSTORE, site, _pyc_store(env)]
        code = _run(env, policy, command, work, output, stopped, deadline)
        if code != 0:
            return CODE_RUNNER_ERROR, _failure(env, code, output)
    progress.say(f"building environment {env.label}: making it read-only")
    shown = {
        "python_home": _python_home(env.dir),
        "built_at": time.time(),
        "id": env.id,
        "bytes": usage(env.dir),  # what another node fetches to have it (placement weighs it)
    }
    with open(os.path.join(env.dir, MARKER), "w", encoding="utf-8") as f:
        json.dump(shown, f)
    _make_readonly(env.dir)
    return None


def _pyc_store(env) -> str:  # noqa: ANN001
    """The node's bytecode store, beside uv's cache."""
    return os.path.join(os.path.dirname(env.cache), PYC_STORE)


def _writable(env, work: str) -> list[str]:  # noqa: ANN001
    """What a build may write: the node's environments directory (the caches are in it),
    and its own work directory."""
    root = os.path.dirname(env.dir)
    inside = [p for p in (env.cache, _pyc_store(env)) if os.path.dirname(p) != root]
    return [root, *inside, work]


def _site_packages(directory: str) -> list[str]:
    lib = os.path.join(directory, "lib")
    try:
        names = sorted(os.listdir(lib))
    except OSError:
        return []
    found = [os.path.join(lib, name, "site-packages") for name in names]
    return [path for path in found if os.path.isdir(path)]


def _run(env, policy, command, work, output, stopped, deadline) -> int:  # noqa: ANN001
    """One step of the build, in its sandbox; its exit code (-1: past the build's time)."""
    uv_env = {**env.uv_env, "UV_CACHE_DIR": env.cache, "HOME": "/tmp", "TMPDIR": "/tmp"}
    uv_env.setdefault("PATH", "/usr/bin:/bin")
    with open(output, "ab") as out:
        if policy is None:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=uv_env,
                cwd=work,
                start_new_session=True,
            )
        else:
            proc = _sandboxed(env, policy, command, work, uv_env, out)
    try:
        while True:
            try:
                return proc.wait(POLL_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            if stopped():
                raise Stopped
            if time.monotonic() > deadline:
                with open(output, "a", encoding="utf-8") as out:
                    out.write(f"\nthe build took longer than {env.timeout:.0f} s: stopped\n")
                return -1
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _sandboxed(env, policy, command, work, uv_env, out):  # noqa: ANN001, ANN202
    env_fd = os.memfd_create("gpupool-envbuild")
    status = os.open(os.devnull, os.O_WRONLY)
    try:
        os.write(env_fd, sandbox.env_file(uv_env))
        os.lseek(env_fd, 0, os.SEEK_SET)
        argv = sandbox.bwrap_argv(
            policy,
            command,
            work,
            # the node's environments as one mount: hard links from the caches into the
            # environment cross no mount (each of its built ones is read-only by its modes)
            _writable(env, work),
            None,  # as the runner's account, with no capability (below)
            env_fd,
            status,
            readonly_dirs=[*env.shown, os.path.dirname(PYCSTORE)],
            network_given=True,  # the index is reached over the node's network
        )
        if os.geteuid() == 0:
            argv[1:1] = ["--cap-drop", "ALL"]
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env={},
            start_new_session=True,
            close_fds=True,
            pass_fds=(env_fd, status),
        )
    finally:
        os.close(env_fd)
        os.close(status)


def _failure(env, code: int, output: str) -> str:  # noqa: ANN001
    try:
        with open(output, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        lines = []
    tail = "\n".join(lines[-OUTPUT_TAIL:])
    how = "took too long" if code == -1 else f"failed (exit code {code})"
    return f"environment {env.label} could not be built on this node: uv {how}:\n{tail}"


def _python_home(directory: str) -> str | None:
    """The interpreter's prefix the environment links to (pyvenv.cfg's ``home``, less bin)."""
    try:
        with open(os.path.join(directory, "pyvenv.cfg"), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition("=")
                if key.strip() == "home":
                    return os.path.dirname(value.strip())
    except OSError:
        pass
    return None


def _make_readonly(directory: str) -> None:
    """No write bit on anything of it: a job sees it read-only, and so does every account."""
    for parent, dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, READONLY_EXEC if mode & 0o111 else READONLY_FILE)
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, READONLY_EXEC)
    os.chmod(directory, READONLY_EXEC)


def _make_writable(directory: str) -> None:
    """Write bits back on a partial build's directories, so it can be removed."""
    for parent, dirs, _files in os.walk(directory):
        for name in dirs:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    with contextlib.suppress(OSError):
        os.chmod(directory, 0o755)


_try_lock = lru.try_lock


def _wait_lock(fd: int, how: int, stopped) -> None:  # noqa: ANN001
    lru.wait_lock(fd, how, stopped, POLL_SECONDS, Stopped)


class _Progress:
    """The attempt's ``progress`` file: what its runner is doing before the job starts."""

    def __init__(self, attempt_dir: str) -> None:
        self.path = os.path.join(attempt_dir, PROGRESS_FILE)

    def say(self, message: str) -> None:
        with contextlib.suppress(OSError):
            atomic_write_json(self.path, {"reason": REASON, "message": message}, durable=False)

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
