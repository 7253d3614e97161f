"""The bridge: the one process of the server that talks to Ray (``python -m
gpupool.cluster.bridge``), a child of the server.

Ray ends a connected process that has lost the head for too long, and that exit cannot be
caught; so the server never imports Ray, and asks this expendable child instead. Requests
and answers are JSON lines on two pipes given as file descriptors (never stdout: Ray's
core writes there when a node dies).

A request: ``{"id": 7, "op": "call", "node": "n1", "method": "poll", "args": {...},
"timeout": 10}``; an answer: ``{"id": 7, "ok": true, "result": ...}`` or ``{"id": 7, "ok":
false, "error": "agent_unavailable", "message": "..."}``. The first line the bridge writes
is ``{"id": 0, "ok": true, "result": {"connected": ...}}`` once it is connected.

No thread waits for an agent's answer: a call is sent (``.remote()``) and answered from Ray's
completion callback, or by the deadline watch when its timeout passes first; so any number
of calls are in flight at once, long waits for changes (``NodeAgent.changes``) among them,
and an answer costs no thread switch of the bridge's own.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from gpupool.cluster.rayenv import NAMESPACE, name_of, node_resource

log = logging.getLogger("gpupool.bridge")

AGENT_PREFIX = "agent:"
SETUP_THREADS = 16  # requests being sent at once (finding an agent may wait for the GCS)

Answer = Callable[[dict[str, Any]], None]


class Bridge:
    """Connected to the cluster at ``address``: answers the server's requests."""

    def __init__(self, address: str) -> None:
        import ray

        self.ray = ray
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,
            configure_logging=False,
        )
        self._agents: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- operations ---------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """The pool's Ray nodes: name (None for a node that is not gpupool's), alive, address."""
        found = []
        for node in self.ray.nodes():
            resources = node.get("Resources") or {}
            found.append(
                {
                    "ray_id": node["NodeID"],
                    "name": name_of(resources) or _name_from_labels(node),
                    "alive": bool(node["Alive"]),
                    "address": node.get("NodeManagerAddress"),
                }
            )
        return found

    def call(self, node: str, method: str, args: dict[str, Any], timeout: float) -> Future[Any]:
        """``method(**args)`` sent to ``node``'s agent (made when it has none): its answer's
        future, done when the agent answers (a RayActorError also forgets the agent)."""
        agent = self._agent(node)
        done = getattr(agent, method).remote(**args).future()

        def forget_dead(finished: Future[Any]) -> None:
            if isinstance(finished.exception(), self.ray.exceptions.RayActorError):
                with self._lock:
                    if self._agents.get(node) is agent:
                        self._agents.pop(node, None)

        done.add_done_callback(forget_dead)
        return done

    def forget_agent(self, node: str) -> None:
        """End ``node``'s agent (the node was removed); its running work is not touched."""
        with self._lock:
            self._agents.pop(node, None)
        try:
            agent = self.ray.get_actor(AGENT_PREFIX + node, namespace=NAMESPACE)
        except ValueError:
            return
        self.ray.kill(agent, no_restart=True)

    def _agent(self, node: str) -> Any:
        with self._lock:
            agent = self._agents.get(node)
            if agent is None:
                agent = self._agents[node] = self._make_agent(node)
            return agent

    def _make_agent(self, node: str) -> Any:
        from gpupool.cluster.agent import MAX_CONCURRENCY, NodeAgent

        remote = self.ray.remote(NodeAgent)
        return remote.options(
            name=AGENT_PREFIX + node,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            resources={node_resource(node): 0.001},
            max_restarts=-1,  # a crashed agent comes back on its node; its jobs are not touched
            max_task_retries=0,
            max_concurrency=MAX_CONCURRENCY,  # a threaded actor: calls do not queue
        ).remote()


class Deadlines:
    """Answers ``timeout`` for a call its agent has not answered in time: one thread for all
    calls in flight, woken by the nearest deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        threading.Thread(target=self._run, name="gpupool-bridge-deadlines", daemon=True).start()

    def add(self, seconds: float, expire: Callable[[], None]) -> None:
        with self._condition:
            entry = (time.monotonic() + seconds, next(self._order), expire)
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:
                self._condition.notify()

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._condition.wait(wait)
                _, _, expire = heapq.heappop(self._heap)
            expire()


class Call:
    """One call in flight: answered once, by the agent's answer or by its deadline."""

    def __init__(self, bridge: Bridge, ident: Any, answer: Answer) -> None:
        self.bridge, self.ident, self.answer = bridge, ident, answer
        self._lock = threading.Lock()
        self._answered = False

    def done(self, finished: Future[Any]) -> None:
        error = finished.exception()
        if error is None:
            self._once({"id": self.ident, "ok": True, "result": finished.result()})
        else:
            self._once({"id": self.ident, "ok": False, **_error(self.bridge, error)})

    def expired(self, timeout: float) -> None:
        message = f"the agent did not answer in {timeout:g} s"
        self._once({"id": self.ident, "ok": False, "error": "timeout", "message": message})

    def _once(self, message: dict[str, Any]) -> None:
        with self._lock:
            if self._answered:
                return
            self._answered = True
        self.answer(message)


def serve(bridge: Bridge, requests: int, answers: int) -> None:
    """Answer requests until the server closes its end."""
    out = os.fdopen(answers, "w", buffering=1)
    lock = threading.Lock()

    def answer(message: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(message) + "\n")

    answer({"id": 0, "ok": True, "result": {"connected": True, "pid": os.getpid()}})
    deadlines = Deadlines()
    with ThreadPoolExecutor(max_workers=SETUP_THREADS) as pool, os.fdopen(requests) as lines:
        for line in lines:
            request = json.loads(line)
            pool.submit(handle, bridge, request, answer, deadlines)


def handle(bridge: Bridge, request: dict[str, Any], answer: Answer, deadlines: Deadlines) -> None:
    """Answer one request, now or (a call) once its agent answered or its timeout passed;
    every failure is an answer, never an exception."""
    ident, op = request.get("id"), request.get("op")
    if op == "call":
        call = Call(bridge, ident, answer)
        try:
            sent = bridge.call(
                request["node"], request["method"], request.get("args") or {}, request["timeout"]
            )
        except Exception as error:  # noqa: BLE001 - every failure goes back to the server
            answer({"id": ident, "ok": False, **_error(bridge, error)})
            return
        deadlines.add(request["timeout"], lambda: call.expired(request["timeout"]))
        sent.add_done_callback(call.done)
        return
    answer(answer_now(bridge, request))


def answer_now(bridge: Bridge, request: dict[str, Any]) -> dict[str, Any]:
    """The answer of a request other than a call; every failure is an answer."""
    ident, op = request.get("id"), request.get("op")
    try:
        if op == "nodes":
            result = bridge.nodes()
        elif op == "forget_agent":
            result = bridge.forget_agent(request["node"])
        else:
            return {"id": ident, "ok": False, "error": "bad_request", "message": f"no op {op}"}
    except Exception as error:  # noqa: BLE001 - every failure goes back to the server
        return {"id": ident, "ok": False, **_error(bridge, error)}
    return {"id": ident, "ok": True, "result": result}


def _error(bridge: Bridge, error: Exception) -> dict[str, str]:
    exceptions = bridge.ray.exceptions
    if isinstance(error, exceptions.GetTimeoutError):
        return {"error": "timeout", "message": str(error)[:500]}
    if isinstance(error, exceptions.RayActorError | exceptions.ActorUnavailableError):
        return {"error": "agent_unavailable", "message": str(error)[:500]}
    return {"error": "failed", "message": f"{type(error).__name__}: {error}"[:2000]}


def _name_from_labels(node: dict[str, Any]) -> str | None:
    labels = node.get("Labels") or {}
    return labels.get("gpupool-node")


def main() -> None:
    address, requests, answers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        bridge = Bridge(address)
    except Exception as error:  # noqa: BLE001 - told to the server, which retries later
        with os.fdopen(answers, "w") as out:
            message = f"{type(error).__name__}: {error}"[:2000]
            out.write(
                json.dumps({"id": 0, "ok": False, "error": "unreachable", "message": message})
            )
            out.write("\n")
        sys.exit(3)
    serve(bridge, requests, answers)


if __name__ == "__main__":
    main()
