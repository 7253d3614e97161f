"""Moving a process into a cgroup without waiting for the kernel: ``favordynmods``.

Each job's sandbox is moved into the job's cgroup before it runs (Linux starts a process in a
cgroup only on v2, with ``clone3``). Every such move takes the kernel's cgroup threadgroup
lock for writing, which waits for an RCU grace period: 9-11 ms per job on a quiet cgroup v1
node, most of a job's start. The kernel's own answer for hosts that move tasks all the time
is the ``favordynmods`` option of a cgroup hierarchy: with it on, a move no longer waits (0.07
ms measured on the same node), and a fork or an exit takes that lock a little more slowly.

The lock is one for the whole kernel, and so is the option's effect: a hierarchy with no
controller, named ``gpupool-moves`` and mounted with ``favordynmods``, turns it on for every
cgroup. ``hold`` mounts one in a private mount namespace of a small process of its own (the
node's mounts are left as they are) that lives as long as the executor that holds it: when
it ends, or is killed, its namespace goes, the hierarchy with it, and the kernel's default
comes back. Several executors on one node each hold it; the last to end turns it off.
``GPUPOOL_CGROUP_FAST_MOVES=false`` keeps the kernel's default (``hold`` is then not called).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

HIERARCHY = "gpupool-moves"
MOUNTED = b"mounted\n"
WAIT_SECONDS = 5.0
# mounted in the holder's own namespace, then it waits for its stdin to close (the executor
# ending, however it ends) and takes the namespace and the hierarchy with it
HOLDER = (
    f'mount -t cgroup -o none,name={HIERARCHY},favordynmods cgroup "$0" '
    '&& printf "mounted\\n" && exec cat >/dev/null'
)


class FastMoves:
    """The holder of the ``favordynmods`` hierarchy; ``close`` ends it."""

    def __init__(self, holder: subprocess.Popen[bytes]) -> None:
        self.holder = holder

    @classmethod
    def hold(cls, directory: Path) -> tuple[FastMoves | None, str | None]:
        """Turn fast moves on while the result lives; (None, why) where it cannot: not
        root, no ``unshare`` or ``mount``, or a kernel without named cgroup v1 hierarchies
        or without ``favordynmods`` (before Linux 6.0). ``directory``: an empty directory
        of the executor's, where the hierarchy is mounted inside the holder's namespace."""
        if os.geteuid() != 0:
            return None, "only root may mount a cgroup hierarchy"
        unshare = shutil.which("unshare")
        if unshare is None or shutil.which("mount") is None:
            return None, "util-linux's unshare and mount are missing"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            holder = subprocess.Popen(
                [unshare, "--mount", "--propagation", "private", "--"]
                + ["sh", "-c", HOLDER, str(directory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a terminal's Ctrl-C is the server's to handle
                close_fds=True,
                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
            )
        except OSError as error:
            return None, f"cannot start the holder: {error}"
        said = _first_line(holder)
        if said != MOUNTED:
            with contextlib.suppress(OSError):
                holder.kill()
            _, err = holder.communicate()
            why = err.decode(errors="replace").strip() or "it did not say it mounted"
            return None, f"cannot mount a cgroup hierarchy with favordynmods: {why}"
        return cls(holder), None

    def close(self) -> None:
        """End the holder (its stdin closed): the kernel's default comes back once no other
        executor holds the hierarchy."""
        with contextlib.suppress(OSError):
            self.holder.stdin.close()  # type: ignore[union-attr]
        try:
            self.holder.wait(WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()
        for stream in (self.holder.stdout, self.holder.stderr):
            if stream is not None:
                stream.close()


def held() -> bool:
    """Whether some process holds the ``favordynmods`` hierarchy now (it is listed in every
    process's cgroups while it exists)."""
    try:
        with open("/proc/self/cgroup") as f:
            return any(line.rstrip().endswith(f"name={HIERARCHY}:/") for line in f)
    except OSError:
        return False


def _first_line(holder: subprocess.Popen[bytes]) -> bytes:
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], WAIT_SECONDS)
    return holder.stdout.readline() if ready else b""
