"""Which account of this machine a connection comes from.

Every caller on the server's machine — a user's CLI or browser, a job, a notebook — connects
from the same address (127.0.0.1, or the machine's own). The kernel records who owns each
socket (the account that made it; no process can change that), and lists the sockets of this
network namespace in ``/proc/net/tcp``: the caller's end of a local connection is found there
by its two addresses, with its owner's uid. The throttle counts such a caller as its address
*and* its account, so that one account's failures (a job's: it runs under its owner's Unix
account, or the job account) hold back no other account on the same address.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

TABLES = {4: Path("/proc/net/tcp"), 6: Path("/proc/net/tcp6")}


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
