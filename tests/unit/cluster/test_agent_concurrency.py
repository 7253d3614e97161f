"""A node agent serves several calls at once (Ray runs it as a threaded actor): launches,
polls, a stop and the server's wait for changes, from many threads, are each served right;
and the server's Ray executor learns of a runner's change through its ``change_fd`` (the
agent's ``changes``), without polling on a timer. The agent is called in process, through a
stand-in for the bridge that calls its methods from the caller's thread, as Ray's threads
would."""

from __future__ import annotations

import select
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.support.tasks import task

from gpupool.cluster.agent import NodeAgent
from gpupool.cluster.client import AgentUnavailable, CallFailed
from gpupool.cluster.executor import RayExecutor
from gpupool.executors.base import Handle
from gpupool.executors.task import Observed

EXIT_LATER = "sleep 0.3; exit {code}"
WAIT_LONG = "exec sleep 600"


class Bridge:
    """Calls the agent of node "n1" as the bridge would (JSON-ready arguments and answers),
    in the calling thread; counts the calls by method."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def call(self, node: str, method: str, timeout: float = 30.0, **args: Any) -> Any:
        with self._lock:
            self.calls[method] = self.calls.get(method, 0) + 1
        if node != "n1":
            raise AgentUnavailable(f"no agent on {node}")
        return getattr(self.agent, method)(**args)

    def close(self) -> None:
        pass


@pytest.fixture
def pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RayExecutor, Bridge]:
    monkeypatch.setenv("GPUPOOL_DATA_DIR", str(tmp_path / "node"))
    monkeypatch.setenv("GPUPOOL_NODE_NAME", "n1")
    monkeypatch.setenv("GPUPOOL_ISOLATION", "off")
    bridge = Bridge(NodeAgent())
    executor = RayExecutor(bridge, tmp_path / "server-jobs")  # type: ignore[arg-type]
    yield executor, bridge
    executor.close()
    bridge.agent.executor.close()


def shell(script: str) -> list[str]:
    """A command any account may run (a job runs under its own account as root)."""
    return ["/bin/sh", "-c", script]


def until_all_ended(executor: RayExecutor, handles: list[Handle], timeout: float = 60.0):  # noqa: ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        results = executor.poll_all(handles)
        if all(r.observed in (Observed.EXITED, Observed.LOST) for r in results):
            return results
        time.sleep(0.05)
    raise AssertionError(f"not ended in {timeout} s: {[r.observed for r in results]}")


def test_launches_polls_and_a_stop_at_once_are_each_served_right(pool) -> None:  # noqa: ANN001
    executor, bridge = pool
    started: dict[int, Handle] = {}
    stopped_once = threading.Event()
    polls_done = threading.Event()

    def launch(job_id: int) -> None:
        command = WAIT_LONG if job_id == 1 else EXIT_LATER.format(code=job_id)
        started[job_id] = executor.start(task(shell(command), job_id=job_id, node="n1"))

    def poll_while_launching() -> int:
        passes = 0
        while not polls_done.is_set():
            handles = list(started.values())
            if handles:
                for result in executor.poll_all(handles):
                    assert result.observed in (Observed.STARTING, Observed.RUNNING, Observed.EXITED)
                passes += 1
            if 1 in started and not stopped_once.is_set():
                executor.stop(started[1], 0.5)  # the stop of job 1 while others launch
                stopped_once.set()
        return passes

    with ThreadPoolExecutor(max_workers=12) as threads:
        pollers = [threads.submit(poll_while_launching) for _ in range(3)]
        list(threads.map(launch, range(1, 21)))
        stop_again = threads.submit(executor.stop, started[1], 0.5)  # stops are idempotent
        stop_again.result()
        results = until_all_ended(executor, [started[j] for j in range(1, 21)])
        polls_done.set()
        assert all(poller.result() > 0 for poller in pollers)

    by_job = dict(zip(range(1, 21), results, strict=True))
    assert by_job[1].observed == Observed.EXITED and by_job[1].exit_code != 0, "stopped"
    for job_id in range(2, 21):
        assert by_job[job_id].observed == Observed.EXITED
        assert by_job[job_id].exit_code == job_id % 256, f"job {job_id}: its own exit code"
    assert bridge.calls["start"] == 20
    attempt_dirs = {h.state["local"]["attempt_dir"] for h in started.values()}
    assert len(attempt_dirs) == 20, "each launch made its own attempt"
    for handle in started.values():
        executor.release(handle)


def test_a_launch_is_not_done_twice_when_sent_twice_at_once(pool) -> None:  # noqa: ANN001
    """At most once: two starts of one attempt at the same moment, one runner runs it."""
    executor, _bridge = pool
    spec = task(shell(EXIT_LATER.format(code=0)), job_id=40, node="n1")
    with ThreadPoolExecutor(max_workers=2) as threads:
        outcomes = list(threads.map(lambda _: _start_or_error(executor, spec), range(2)))
    handles = [h for h in outcomes if isinstance(h, Handle)]
    results = until_all_ended(executor, handles)
    assert sorted(r.exit_code for r in results if r.observed == Observed.EXITED)[:1] == [0]
    lost_or_refused = [o for o in outcomes if not isinstance(o, Handle)] + [
        r for r in results if r.observed == Observed.LOST
    ]
    assert len(lost_or_refused) == 1, "the second start is refused or its runner refuses"


def _start_or_error(executor: RayExecutor, spec) -> Handle | Exception:  # noqa: ANN001
    try:
        return executor.start(spec)
    except Exception as error:  # noqa: BLE001 - the refusal is what the test looks at
        return error


def test_the_server_is_told_of_a_change_through_its_change_fd(pool) -> None:  # noqa: ANN001
    executor, bridge = pool
    fd = executor.change_fd()
    assert fd is not None
    handle = executor.start(task(shell(EXIT_LATER.format(code=0)), job_id=7, node="n1"))
    executor.poll_all([handle])

    ended_at = None
    deadline = time.monotonic() + 30
    while ended_at is None and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        assert ready, "the watch rang"
        executor.clear_changes()
        result = executor.poll_all([handle])[0]
        if result.observed == Observed.EXITED:
            ended_at = time.monotonic()
    assert ended_at is not None, "each ring was a change, the last one the exit"
    assert bridge.calls["changes"] >= 2, "the watch waits in the agent, call after call"
    executor.release(handle)


def test_changes_returns_at_once_when_the_count_moved_and_waits_otherwise(pool) -> None:  # noqa: ANN001
    executor, _bridge = pool
    agent: NodeAgent = executor.cluster.agent  # type: ignore[attr-defined]
    now = agent.changes(-1, 5.0)
    assert agent.changes(now, 0.2) == now, "nothing changed: the wait ends, same count"

    with ThreadPoolExecutor(max_workers=1) as threads:
        waiting = threads.submit(agent.changes, now, 30.0)
        handle = executor.start(task(shell(EXIT_LATER.format(code=0)), job_id=8, node="n1"))
        assert waiting.result(timeout=30) > now, "a runner's change ended the wait"
    until_all_ended(executor, [handle])
    executor.release(handle)


def test_released_attempts_go_to_their_node_with_its_next_poll(pool) -> None:  # noqa: ANN001
    executor, bridge = pool
    agent: NodeAgent = bridge.agent
    first = executor.start(task(shell(EXIT_LATER.format(code=0)), job_id=11, node="n1"))
    second = executor.start(task(shell(WAIT_LONG), job_id=12, node="n1"))
    until_all_ended(executor, [first])
    attempt_dir = first.state["local"]["attempt_dir"]
    assert attempt_dir in agent.executor._records  # the agent's record of the ended attempt

    executor.release(first)
    assert "release" not in bridge.calls, "no call of its own"
    polls = bridge.calls["poll"]
    executor.poll_all([second])
    assert bridge.calls["poll"] == polls + 1, "one call: the release rode on the poll"
    assert attempt_dir not in agent.executor._records

    executor.stop(second, 0.0)
    until_all_ended(executor, [second])
    executor.release(second)
    polls = bridge.calls["poll"]
    executor.poll_all([])  # nothing left running there: a call only to release
    assert bridge.calls["poll"] == polls + 1
    assert second.state["local"]["attempt_dir"] not in agent.executor._records
    executor.poll_all([])
    assert bridge.calls["poll"] == polls + 1, "nothing to release, nothing asked"


class OlderAgent:
    """An agent made by an older server: its poll takes no releases (Ray raises: CallFailed)."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    def poll(self, handles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.agent.poll(handles)


class RaisingBridge(Bridge):
    def call(self, node: str, method: str, timeout: float = 30.0, **args: Any) -> Any:
        try:
            return super().call(node, method, timeout, **args)
        except TypeError as error:
            raise CallFailed(f"TypeError: {error}") from error


def test_an_agent_of_an_older_server_gets_its_releases_one_by_one(pool) -> None:  # noqa: ANN001
    executor, bridge = pool
    agent: NodeAgent = bridge.agent
    older = RaisingBridge(OlderAgent(agent))  # type: ignore[arg-type]
    executor.cluster = older
    handle = executor.start(task(shell(EXIT_LATER.format(code=0)), job_id=21, node="n1"))
    until_all_ended(executor, [handle])
    attempt_dir = handle.state["local"]["attempt_dir"]

    executor.release(handle)
    executor.poll_all([])

    assert older.calls["release"] == 1
    assert attempt_dir not in agent.executor._records
