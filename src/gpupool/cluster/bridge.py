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
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpupool.cluster.rayenv import NAMESPACE, name_of, node_resource

log = logging.getLogger("gpupool.bridge")

AGENT_PREFIX = "agent:"


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

    def call(self, node: str, method: str, args: dict[str, Any], timeout: float) -> Any:
        """``method(**args)`` on ``node``'s agent (made when it has none)."""
        agent = self._agent(node)
        try:
            return self.ray.get(getattr(agent, method).remote(**args), timeout=timeout)
        except self.ray.exceptions.RayActorError:
            with self._lock:
                self._agents.pop(node, None)
            raise

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
        from gpupool.cluster.agent import NodeAgent

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
        ).remote()


def serve(bridge: Bridge, requests: int, answers: int) -> None:
    """Answer requests until the server closes its end."""
    out = os.fdopen(answers, "w", buffering=1)
    lock = threading.Lock()

    def answer(message: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(message) + "\n")

    answer({"id": 0, "ok": True, "result": {"connected": True, "pid": os.getpid()}})
    with ThreadPoolExecutor(max_workers=16) as pool, os.fdopen(requests) as lines:
        for line in lines:
            request = json.loads(line)
            pool.submit(lambda r=request: answer(handle(bridge, r)))


def handle(bridge: Bridge, request: dict[str, Any]) -> dict[str, Any]:
    """One request's answer; every failure is an answer, never an exception."""
    ident, op = request.get("id"), request.get("op")
    try:
        if op == "nodes":
            result = bridge.nodes()
        elif op == "call":
            result = bridge.call(
                request["node"], request["method"], request.get("args") or {}, request["timeout"]
            )
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
