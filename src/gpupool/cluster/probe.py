"""Whether the Ray head is there: a TCP connect to its GCS port, and since when it has not
answered. Cheap, needs no Ray, and a refused connection answers at once, whereas Ray's own
calls block while the head is away. The server's head watch and a node's joiner use it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from gpupool.cluster.rayenv import split_address

PROBE_TIMEOUT_S = 1.0
STRIKES = 2  # failed connects in a row before the head counts as gone (one may be a blip)


def gcs_answers(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the head's GCS port at ``address`` ('host:port') accepts a connection."""
    try:
        with socket.create_connection(split_address(address), timeout=timeout):
            return True
    except OSError:
        return False


class HeadProbe:
    """Probes the head at ``address`` and remembers since when it has not answered."""

    def __init__(
        self,
        address: str,
        strikes: int = STRIKES,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str], bool] = gcs_answers,
    ) -> None:
        self.address, self.strikes, self.clock, self.probe = address, strikes, clock, probe
        self.failed = 0
        self.silent_since: float | None = None  # the first failed connect of this outage

    def look(self) -> bool:
        """Probe once; True while the head counts as there (``strikes`` failures in a row
        make it gone)."""
        if self.probe(self.address):
            self.failed, self.silent_since = 0, None
            return True
        self.failed += 1
        if self.silent_since is None:
            self.silent_since = self.clock()
        return self.failed < self.strikes

    def lost_for(self) -> float:
        """Seconds since the head stopped answering (0 while it answers)."""
        return 0.0 if self.silent_since is None else self.clock() - self.silent_since
