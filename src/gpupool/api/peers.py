"""Which account of this machine a connection comes from.

Every caller on the server's machine — a user's CLI or browser, a job, a notebook — connects
from the same address (127.0.0.1, or the machine's own). The kernel records who owns each
socket (the account that made it; no process can change that), and lists the sockets of this
network namespace in ``/proc/net/tcp``: the caller's end of a local connection is found there
by its two addresses, with its owner's uid. The throttle counts such a caller as its address
*and* its account, so that one account's failures (a job's: it runs under its owner's Unix
account, or the job account) hold back no other account on the same address.

A job with a network of its own reaches the API through its runner's bridge, which relays
its loopback's port to the server's Unix socket: there the kernel tells the connecting
process (SO_PEERCRED), the bridge, which its runner forked in the attempt's directory
(``JOBS_DIR/<job>/attempts/<n>``, the runner's working directory, which no job can change).
Such a caller is counted as its job.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import sys
from pathlib import Path
from typing import Any

TABLES = {4: Path("/proc/net/tcp"), 6: Path("/proc/net/tcp6")}
# where the server keeps the pid of a caller on its Unix socket, in each request's state
PEER_PID = "gpupool.peer_pid"


def socket_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the socket at ``peer`` that is connected to ``local``, the server's
    end; None for a caller whose socket is not on this machine (or no ``/proc``)."""
    try:
        address, mine = ipaddress.ip_address(peer[0]), ipaddress.ip_address(local[0])
    except ValueError:
        return None
    if address.version != mine.version or not (address.is_loopback or address == mine):
        return None  # another machine's socket: nothing here to find, so nothing to read
    wanted = (_hex(address, peer[1]), _hex(mine, local[1]))
    try:
        lines = TABLES[address.version].read_text().splitlines()[1:]
    except OSError:
        return None
    return _owner(lines, wanted)


def unix_peer_pid(sock: Any) -> int | None:  # noqa: ANN401 - a socket or asyncio's wrapper
    """The pid of the process that connected ``sock``, a Unix socket (SO_PEERCRED); None for
    another kind of socket, or none."""
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, _uid, _gid = struct.unpack("3i", creds)
    return pid or None


def bridged_job(pid: int, jobs_dir: Path) -> int | None:
    """The job whose runner's bridge is ``pid``: the bridge's parent is its runner, whose
    working directory is the attempt's, ``jobs_dir/<job>/attempts/<n>``. None for another
    process (or one that ended)."""
    runner = _parent(pid)
    if runner is None:
        return None
    try:
        where = Path(os.readlink(f"/proc/{runner}/cwd"))
        parts = where.relative_to(os.path.realpath(jobs_dir)).parts
    except (OSError, ValueError):
        return None
    if len(parts) != 3 or parts[1] != "attempts" or not all(p.isdigit() for p in parts[::2]):
        return None
    return int(parts[0])


def _parent(pid: int) -> int | None:
    """The parent of ``pid``, from /proc/PID/status (readable by every account)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("PPid:"):
                    return int(line.split()[1]) or None
    except (OSError, ValueError, IndexError):
        return None
    return None


def _owner(lines: list[str], wanted: tuple[str, str]) -> int | None:
    """The uid of the row whose local and remote addresses are ``wanted``."""
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and (fields[1], fields[2]) == wanted:
            return int(fields[7])
    return None


def _hex(address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """An address as /proc/net/tcp writes it: each 32-bit word in the machine's byte order,
    then the port, in upper-case hexadecimal."""
    packed, step = address.packed, -1 if sys.byteorder == "little" else 1
    words = (packed[i : i + 4][::step] for i in range(0, len(packed), 4))
    return f"{b''.join(words).hex().upper()}:{port:04X}"
