"""Network namespaces made ahead of need, with egress already attached (stdlib only).

Configuring pasta on a fresh namespace takes 20-40 ms (it runs one netlink exchange after
another), which a job would otherwise wait for before it starts. The fork server of a root
executor therefore keeps a few namespaces warm: each made with ``unshare(CLONE_NEWNET)``
and handed straight back (the fork server stays in the node's namespace), with its pasta
started at once, in the background. A runner for a job with a network of its own takes
one, starts bwrap inside it (instead of ``--unshare-net``), and owns it from then on: its
pasta stops when the attempt ends, as a pasta the runner started itself would, unless the
namespace can serve the next job of the same account (below).

Each warm namespace has a directory ``JOBS_DIR/.warm-network/FORKSERVERPID-N`` holding
pasta's pid file and a ``state.json`` naming the process that owns it (the fork server,
then the runner that took it), so that the executor's sweep of pasta left by killed
runners (``network.leftover_egress``) finds these too. Where pasta fails (a node without a
routable interface), warming stops for a while and runners make their namespace
themselves, as without this.

Given back. pasta's set-up costs 20-25 ms of CPU a namespace (it maps and touches large
buffers), which a pool draining short jobs pays at every start. So a runner whose job has
ended gives its namespace back to the fork server (a datagram on ``return.sock`` carrying
the namespace's descriptor) when nothing of the job is left in it: no process (its sandbox's
PID namespace is gone, its bridge stopped) and no socket at all (the namespace's socket
counts show none, not even one waiting in TIME_WAIT, which would keep a port the next job
may want). It then serves the next launch for the same Unix account only, and is
discarded after ``REUSE_SECONDS`` unused. Every other namespace is discarded, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time

from gpupool.runner.bridge import unix_address
from gpupool.runner.layout import STATE_FILE, process_create_time
from gpupool.runner.network import (
    PASTA_LOG_FILE,
    PASTA_OPTIONS,
    PASTA_PID_FILE,
    is_pasta,
    pid_file_of,
    runner_alive,
)

WARM_DIR = ".warm-network"  # under the executor's jobs directory
CLONE_NEWNET = 0x40000000
SLOTS = 2  # namespaces kept ready: a launch takes one, the next is being made meanwhile
FAILED_PAUSE_SECONDS = 60.0  # after pasta failed: how long launches make their own
BACKGROUND_NICE = 10  # pasta's priority while it makes a namespace ahead of need
READY_SECONDS = 5.0  # how long a runner waits for a slot's pasta still configuring
RETURN_SOCKET = "return.sock"  # in the warm directory: where runners give namespaces back
REUSE_SECONDS = 30.0  # how long a namespace given back waits for its account's next job
KEPT_PER_SLOT = 4  # namespaces given back kept at most: this many for each warm slot
SOCKET_COUNTS = ("sockstat", "sockstat6")  # the namespace's own socket counts, in /proc/net


class Slot:
    """One warm namespace: its directory and the descriptor that keeps it alive."""

    __slots__ = ("dir", "fd", "starter", "pid", "uid", "returned_at")

    def __init__(self, directory: str, fd: int, starter: int | None = None) -> None:
        self.dir = directory
        self.fd = fd
        self.starter = starter  # pasta's foreground process while it configures
        self.pid: int | None = None  # pasta's, once read from its pid file
        self.uid: str | None = None  # given back: the account whose job used it
        self.returned_at = 0.0  # given back: when (time.monotonic())

    def pid_file(self) -> str:
        return os.path.join(self.dir, PASTA_PID_FILE)

    def pasta_pid(self) -> int | None:
        """pasta's pid once it has configured the namespace (it writes the file when it
        goes to the background, after configuring), else None."""
        if self.pid is not None:
            return self.pid if is_pasta(self.pid) else None
        with contextlib.suppress(OSError, ValueError):
            with open(self.pid_file()) as f:
                pid = int(f.read().strip())
            if is_pasta(pid):
                self.pid = pid
                return pid
        return None

    def own(self, pid: int | None = None) -> None:
        """Name the calling process (or ``pid``) as the owner: a pasta whose owner is gone
        is stopped by the next sweep. Not synced to disk: after a crash of the machine
        there is no namespace left to own."""
        pid = pid or os.getpid()
        record = {"runner_pid": pid, "runner_create_time": process_create_time(pid)}
        path = os.path.join(self.dir, STATE_FILE)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "w") as f:
            json.dump(record, f)
        os.replace(partial, path)

    def failed(self) -> bool:
        """Whether pasta gave up (its foreground process ended without going to the
        background: no routable interface, most likely)."""
        return self.pasta_pid() is None and (self.starter is None or not _alive(self.starter))

    def wait_ready(self, seconds: float = READY_SECONDS) -> bool:
        """Whether pasta configured the namespace, waiting while it still configures; a
        ready pasta gets the normal priority back (it carries the job's traffic now)."""
        deadline = time.monotonic() + seconds
        while (pid := self.pasta_pid()) is None:
            if self.starter is not None and _alive(self.starter):
                with contextlib.suppress(OSError):  # the job waits for it now
                    os.setpriority(os.PRIO_PROCESS, self.starter, 0)
            if self.failed() or time.monotonic() >= deadline:
                return self.pasta_pid() is not None  # it may have written the file and gone
            time.sleep(0.001)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 0)
        return True

    def give_back(self, uid: str) -> bool:
        """Hand the namespace back to the fork server that made it, for the next job of
        account ``uid``; whether it took it (else the caller discards it). Only a namespace
        that holds no socket, after the job's processes are gone, and whose pasta runs."""
        server = os.getppid()  # the fork server forked this runner; 1 (or a reaper) if gone
        path = os.path.join(os.path.dirname(self.dir), RETURN_SOCKET)
        if self.pasta_pid() is None or in_use(self.fd) or not os.path.exists(path):
            return False
        self.own(server)  # the fork server's from here: no sweep takes its pasta meanwhile
        message = json.dumps({"dir": self.dir, "uid": uid}).encode()
        fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, self.fd.to_bytes(4, "little"))]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, unix_address(path) as to:
                sock.sendmsg([message], fds, 0, to)
        except OSError:
            self.own()  # nobody took it: this runner discards it
            return False
        with contextlib.suppress(OSError):
            os.close(self.fd)
        return True

    def discard(self) -> None:
        """Stop its pasta, close the namespace, remove the directory. A pasta still
        configuring, or whose pid file is gone (its directory removed under it), is found by
        the pid file named on its command line."""
        pids = [pid for pid in (self.pasta_pid(),) if pid is not None]
        if not pids or (self.starter is not None and _alive(self.starter)):
            if self.starter is not None and is_pasta(self.starter):
                pids.append(self.starter)
            pids += pastas_writing(self.pid_file())
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        shutil.rmtree(self.dir, ignore_errors=True)


class WarmPool:
    """The fork server's warm namespaces (root only: an unprivileged namespace would need
    a user namespace of its own, which bwrap's nesting does not allow here)."""

    def __init__(self, root: str, pasta: str, size: int = SLOTS) -> None:
        self.root = root
        self.pasta = pasta
        self.size = size
        self.slots: list[Slot] = []
        self.returned: list[Slot] = []  # given back by runners, newest last
        self.paused_until = 0.0
        self.made = 0
        self._host = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._libc = ctypes.CDLL(None, use_errno=True)
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)  # only root's runners give namespaces back
        path = os.path.join(root, RETURN_SOCKET)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.returns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with unix_address(path) as address:  # a deep data directory's path is too long
            self.returns.bind(address)
        self.returns.setblocking(False)

    def take(self, uid: str | None = None) -> Slot | None:
        """A namespace given back by a job of account ``uid`` (the newest), else the
        oldest warm slot not known to have failed (still configuring, perhaps: the runner
        waits for it), or None; the caller refills afterwards."""
        for slot in reversed(self.returned):
            if uid is not None and slot.uid == uid:
                self.returned.remove(slot)
                if slot.pasta_pid() is not None:
                    return slot
                slot.discard()  # its pasta is gone: the namespace has no egress
        while self.slots:
            slot = self.slots.pop(0)
            if slot.failed():
                slot.discard()  # pasta gave up: no routable interface, most likely
                self.paused_until = time.monotonic() + FAILED_PAUSE_SECONDS
                continue
            return slot
        return None

    def wanting(self) -> bool:
        """Whether a slot is missing and may be made now (not paused after a failure)."""
        return len(self.slots) < self.size and time.monotonic() >= self.paused_until

    def fill(self) -> None:
        """Make slots until there are ``size`` (none while paused after a failure)."""
        while len(self.slots) < self.size and time.monotonic() >= self.paused_until:
            made = self._make()
            if made is None:
                self.paused_until = time.monotonic() + FAILED_PAUSE_SECONDS
                return
            self.slots.append(made)

    def receive(self) -> None:
        """Take in the namespaces runners gave back (none waiting: returns at once); drop
        those kept longer than ``REUSE_SECONDS`` or beyond ``KEPT_PER_SLOT`` per slot."""
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.returns, 4096, 1)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            slot = self._returned(message, fds)
            if slot is not None:
                self.returned.append(slot)
        now = time.monotonic()
        keep = max(1, self.size) * KEPT_PER_SLOT
        while self.returned and (
            len(self.returned) > keep or now - self.returned[0].returned_at > REUSE_SECONDS
        ):
            self.returned.pop(0).discard()

    def next_expiry(self) -> float | None:
        """Seconds until the oldest namespace given back is discarded, or None."""
        if not self.returned:
            return None
        return max(0.0, self.returned[0].returned_at + REUSE_SECONDS - time.monotonic())

    def close(self) -> None:
        """Discard every slot not taken (the fork server is ending)."""
        self.receive()
        for slot in self.slots + self.returned:
            slot.discard()
        self.slots, self.returned = [], []
        self.returns.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.root, RETURN_SOCKET))
        with contextlib.suppress(OSError):
            os.rmdir(self.root)  # only if empty: taken slots belong to their runners

    def _returned(self, message: bytes, fds: list[int]) -> Slot | None:
        """The slot a runner gave back, if it is one this fork server made."""
        try:
            data = json.loads(message)
            directory, uid = str(data["dir"]), str(data["uid"])
        except (ValueError, KeyError, TypeError):
            data = None
        if data is None or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        mine = os.path.dirname(directory) == self.root and os.path.basename(directory).startswith(
            f"{os.getpid()}-"
        )
        slot = Slot(directory, fds[0])
        if not mine or not os.path.isdir(directory):
            with contextlib.suppress(OSError):
                os.close(fds[0])
            return None
        if slot.pasta_pid() is None:
            slot.discard()
            return None
        slot.own()
        slot.uid, slot.returned_at = uid, time.monotonic()
        return slot

    def _make(self) -> Slot | None:
        self.made += 1
        directory = os.path.join(self.root, f"{os.getpid()}-{self.made}")
        try:
            os.mkdir(directory, 0o700)
            fd = self._unshare()
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            return None
        slot = Slot(directory, fd)
        slot.own()
        argv = [self.pasta, *PASTA_OPTIONS, "--runas", "0"]
        argv += ["--netns", f"/proc/self/fd/{fd}", "--pid", slot.pid_file()]
        try:
            with open(os.path.join(directory, PASTA_LOG_FILE), "ab") as log:
                starter = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    close_fds=True,
                    pass_fds=(fd,),
                    env={},
                    preexec_fn=_background,  # the fork server has no threads
                )
        except OSError:
            slot.discard()
            return None
        slot.starter = starter.pid
        return slot

    def _unshare(self) -> int:
        """A new network namespace, and a descriptor on it; the caller stays in its own."""
        if self._libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        try:
            return os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            if self._libc.setns(self._host, CLONE_NEWNET) != 0:
                # still in the new namespace: nothing this process forks may run there
                os._exit(1)


def sweep_warm(root: str) -> None:
    """Remove the directories of warm namespaces whose owner (a fork server or a runner)
    is gone; their pasta was stopped by the sweep of ``network.leftover_egress``."""
    with contextlib.suppress(OSError):
        for name in os.listdir(root):
            directory = os.path.join(root, name)
            if not runner_alive(os.path.join(directory, PASTA_PID_FILE)):
                shutil.rmtree(directory, ignore_errors=True)


def pastas_writing(pid_file: str) -> list[int]:
    """The pasta processes started with ``--pid pid_file`` (read from /proc)."""
    wanted = os.path.realpath(pid_file)
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and is_pasta(int(entry)) and pid_file_of(int(entry)) == wanted:
            found.append(int(entry))
    return found


def in_use(fd: int) -> bool:
    """Whether the network namespace ``fd`` holds any socket of an internet protocol
    (listening, connected, bound, or waiting to close: ``inuse`` and ``tw`` of its own
    ``/proc/net/sockstat``), read with the calling thread in it for a moment. Those counts
    are the namespace's own and cost nothing to read, where ``/proc/net/tcp`` walks the
    whole machine's connection table (milliseconds on a busy node)."""

    def held() -> int:
        count = 0
        for name in SOCKET_COUNTS:
            with open(f"/proc/thread-self/net/{name}") as f:
                for line in f:
                    fields = line.split()
                    for key in ("inuse", "tw"):
                        if key in fields[:-1]:
                            count += int(fields[fields.index(key) + 1])
        return count

    try:
        return spawn_in(fd, held) > 0
    except (OSError, ValueError):
        return True


def spawn_in(fd: int, spawn):  # noqa: ANN001, ANN201 - spawn: () -> Popen
    """Run ``spawn()`` with the calling thread in the network namespace ``fd``, and come
    back: what it forks (bwrap) is born in that namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    host = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the warm namespace failed")
        try:
            return spawn()
        finally:
            if libc.setns(host, CLONE_NEWNET) != 0:
                os._exit(1)  # the runner must not go on inside the job's namespace
    finally:
        os.close(host)


def _background() -> None:
    """pasta configures a namespace nobody waits for yet: let launches go first (the
    runner that takes it gives it back its normal priority, for the job's traffic)."""
    os.nice(BACKGROUND_NICE)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (the fork server's children are reaped by the kernel)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
