"""The bridge answers each call once, without a thread waiting for it: from the agent's
answer when it comes, else ``timeout`` when its time is up (a late answer is then dropped);
a dead agent is ``agent_unavailable``. Ray stands in as futures the test completes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from gpupool.cluster.bridge import Deadlines, handle


class RayActorError(Exception):
    pass


class ActorUnavailableError(Exception):
    pass


class GetTimeoutError(Exception):
    pass


class FakeBridge:
    """Each call's future is kept for the test to complete; nodes() answers at once."""

    def __init__(self) -> None:
        self.ray = SimpleNamespace(
            exceptions=SimpleNamespace(
                RayActorError=RayActorError,
                ActorUnavailableError=ActorUnavailableError,
                GetTimeoutError=GetTimeoutError,
            )
        )
        self.sent: list[tuple[str, str, Future[Any]]] = []

    def call(self, node: str, method: str, args: dict[str, Any], timeout: float) -> Future[Any]:
        if node == "gone":
            raise RayActorError("no such actor")
        future: Future[Any] = Future()
        self.sent.append((node, method, future))
        return future

    def nodes(self) -> list[dict[str, Any]]:
        return [{"name": "n1", "alive": True}]


class Answers:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self._condition = threading.Condition()

    def __call__(self, message: dict[str, Any]) -> None:
        with self._condition:
            self.got.append(message)
            self._condition.notify_all()

    def wait_for(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        with self._condition:
            assert self._condition.wait_for(lambda: len(self.got) >= count, timeout)
            return list(self.got)


def call(ident: int, node: str = "n1", timeout: float = 30.0) -> dict[str, Any]:
    return {
        "id": ident,
        "op": "call",
        "node": node,
        "method": "poll",
        "args": {},
        "timeout": timeout,
    }


def test_calls_are_answered_in_the_order_their_agents_answer() -> None:
    bridge, answers, deadlines = FakeBridge(), Answers(), Deadlines()
    handle(bridge, call(1), answers, deadlines)  # type: ignore[arg-type]
    handle(bridge, call(2), answers, deadlines)  # type: ignore[arg-type]
    assert answers.got == [], "both in flight, no thread waits on either"

    bridge.sent[1][2].set_result(["two"])
    bridge.sent[0][2].set_exception(RuntimeError("a defect of the agent"))

    got = answers.wait_for(2)
    assert got[0] == {"id": 2, "ok": True, "result": ["two"]}
    assert got[1]["id"] == 1 and got[1]["error"] == "failed"
    assert "a defect of the agent" in got[1]["message"]


def test_an_unanswered_call_times_out_once_and_its_late_answer_is_dropped() -> None:
    bridge, answers, deadlines = FakeBridge(), Answers(), Deadlines()
    handle(bridge, call(3, timeout=0.2), answers, deadlines)  # type: ignore[arg-type]
    handle(bridge, call(4, timeout=30.0), answers, deadlines)  # type: ignore[arg-type]

    got = answers.wait_for(1)
    assert got == [{"id": 3, "ok": False, "error": "timeout", "message": got[0]["message"]}]
    bridge.sent[0][2].set_result("too late")
    bridge.sent[1][2].set_result("in time")
    got = answers.wait_for(2)
    time.sleep(0.1)
    assert [(a["id"], a["ok"]) for a in answers.got] == [(3, False), (4, True)]


def test_a_dead_agent_is_unavailable_and_other_requests_answer_at_once() -> None:
    bridge, answers, deadlines = FakeBridge(), Answers(), Deadlines()
    handle(bridge, call(5, node="gone"), answers, deadlines)  # type: ignore[arg-type]
    handle(bridge, call(6), answers, deadlines)  # type: ignore[arg-type]
    bridge.sent[0][2].set_exception(ActorUnavailableError("restarting"))
    handle(bridge, {"id": 7, "op": "nodes"}, answers, deadlines)  # type: ignore[arg-type]
    handle(bridge, {"id": 8, "op": "nope"}, answers, deadlines)  # type: ignore[arg-type]

    got = {a["id"]: a for a in answers.wait_for(4)}
    assert got[5]["error"] == "agent_unavailable"
    assert got[6]["error"] == "agent_unavailable"
    assert got[7] == {"id": 7, "ok": True, "result": [{"name": "n1", "alive": True}]}
    assert got[8]["error"] == "bad_request"
