"""What every executor shares: where an attempt listens, read from its handle."""

from __future__ import annotations

from gpupool.domain.endpoints import Endpoint, RelayTarget
from gpupool.executors.base import listening


def test_where_an_attempt_listens_is_what_its_executor_recorded() -> None:
    """``Executor.endpoint``'s reading of a handle's state (the local executor's as is, a
    pool's gang's first task's): its address, or the runner's socket, or the node agent's
    relay; nothing for a state without a valid port and host."""
    assert listening({"port": 41000, "host": "10.0.0.5"}) == Endpoint("10.0.0.5", 41000)
    inside = {"port": 8000, "host": "127.0.0.1", "socket": "/d/a/listen.sock"}
    assert listening(inside) == Endpoint("127.0.0.1", 8000, "/d/a/listen.sock")
    assert listening(inside).via == "/d/a/listen.sock"
    relay = {"host": "10.0.0.7", "port": 7100, "key": "k", "job_id": 3, "attempt": 1}
    relayed = listening({"port": 8000, "host": "127.0.0.1", "relay": relay})
    assert relayed is not None and relayed.via == RelayTarget("10.0.0.7", 7100, "k", 3, 1)
    # a relay that is not one: never the address instead (the workload's own loopback)
    assert listening({"port": 8000, "host": "127.0.0.1", "relay": {"host": "x"}}) is None
    for state in ({}, {"port": 8000}, {"port": "80", "host": "h"}, {"port": 0, "host": "h"}):
        assert listening(state) is None
    assert listening({"port": 70000, "host": "h"}) is None
    assert Endpoint("::1", 8000).url == "http://[::1]:8000"
