"""``gpupool node join``: make this machine a node of a pool.

It shows the join token to the server, gets the Ray head's address and the pool's Ray
secret, starts a Ray node carrying the node's name (``ray start --address ... --block``, in
a session of its own), and waits until the server has discovered the node and may schedule
on it, saying how long that took. It then stays in the foreground, as a service manager or
a Kubernetes pod expects, and stops the node when it is stopped (SIGTERM, Ctrl-C).

While it stays it keeps the node in the pool: when the Ray node ends (the head went away,
and Ray ends a node that lost its head), it starts it again, with a backoff, once the head
answers again; and when the head has not answered for ``node_lost_seconds`` (the server's
setting, given with the join answer), it stops every attempt the node still runs, since by
then the server may hand their GPUs to other work.

The node's agent reads its settings from the ``GPUPOOL_*`` variables given to the Ray node:
its name, its data directory (its jobs' records and logs), its declared inventory.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.client.api import Client
from gpupool.cluster.lost import stop_own_work
from gpupool.cluster.probe import HeadProbe
from gpupool.cluster.process import RayProcess, RayStartError, last_line, start_node
from gpupool.cluster.rayenv import (
    LOOPBACK,
    LOOPBACK_SWITCH,
    TOKEN_FILE,
    node_resource,
    only_loopback,
    ray_environment,
    split_address,
    write_token,
)

WAIT_SCHEDULABLE_S = 120.0
KEEP_INTERVAL_S = 1.0
LOST_GRACE_S = 5.0  # SIGTERM to SIGKILL for the work of a node that lost its head
RESTART_FIRST_S = 1.0  # the wait before the first start of a node that ended; doubled
RESTART_LONGEST_S = 30.0  # after each failed start, up to this
RESTART_TIMEOUT_S = 60.0
START_TRIES = 6  # `ray start` tries at join (gpupool node join --start-tries)
LOOPBACK_ONLY = (
    "the pool's Ray head is at 127.0.0.1, which Ray rewrites to this machine's own address on "
    "a machine with other network interfaces: start the server with --host set to an address "
    "the nodes reach, or run the server and its nodes in a network namespace that holds only "
    "the loopback interface (unshare --net)"
)
NODE_RECORD = "node.json"


class JoinError(Exception):
    """The machine could not join; the message says why and what to do."""


@dataclass
class JoinRequest:
    server: str
    token: str
    name: str
    data_dir: Path
    declared: dict[str, str] = field(default_factory=dict)  # GPUPOOL_* name -> value
    start_tries: int = START_TRIES  # `ray start` tries before the join gives up


@dataclass
class Joined:
    node: RayProcess
    ray_seconds: float  # ray start until the Ray node ran
    schedulable_seconds: float  # ray start until the server may schedule on it
    request: JoinRequest
    head: str  # the Ray head's address
    lost_seconds: float  # the server's node_lost_seconds: stop the node's work after it

    @property
    def record(self) -> Path:
        return self.request.data_dir / "cluster" / NODE_RECORD


def default_name() -> str:
    return socket.gethostname() or "localhost"


def join(request: JoinRequest, say: Callable[[str], None] = print) -> Joined:
    """Start this machine's Ray node and wait until the pool schedules on it."""
    client = Client(request.server)
    answer = client.join(request.token, request.name)  # refused for a removed node
    host, _ = split_address(answer["ray_address"])
    if host == LOOPBACK and not only_loopback():
        raise JoinError(LOOPBACK_ONLY)
    record = request.data_dir / "cluster" / NODE_RECORD
    env = node_env(request, answer)
    log_path = request.data_dir / "cluster" / "ray-node.log"
    if RayProcess.found(record, env, log_path) is not None:
        raise JoinError(
            f"a node of this data directory ({request.data_dir}) runs already: stop it first, "
            "or give another --data-dir and --name"
        )
    node = RayProcess(node_args(request, answer), env, log_path)
    began = time.monotonic()
    say(f"starting the Ray node of {request.name}, joining {answer['ray_address']}")
    node = start_node(node, request.start_tries, say)
    node.save(record)
    ray_seconds = time.monotonic() - began
    wait_schedulable(client, request, node)
    seconds = time.monotonic() - began
    lost = float(answer["node_lost_seconds"])
    return Joined(node, ray_seconds, seconds, request, answer["ray_address"], lost)


def node_args(request: JoinRequest, answer: dict) -> list[str]:
    return [
        f"--address={answer['ray_address']}",
        f"--resources={json.dumps({node_resource(request.name): 1})}",
        "--num-gpus=0",  # gpupool hands out GPUs itself; Ray must not set CUDA_VISIBLE_DEVICES
        f"--object-store-memory={answer['object_store_bytes']}",
        "--disable-usage-stats",
    ]


def node_env(request: JoinRequest, answer: dict) -> dict[str, str]:
    """Ray's variables (the secret kept in a 0600 file of the node's data directory) and the
    agent's settings."""
    token = write_token(request.data_dir / "cluster" / TOKEN_FILE, answer["ray_token"])
    host, _ = split_address(answer["ray_address"])
    env = ray_environment(token, host, answer["health_period_ms"], answer["health_failures"])
    # `ray start` refuses to start a worker with Ray's loopback switch: a node joins a head on
    # 127.0.0.1 only where that is the machine's one address (a namespace holding only lo).
    env.pop(LOOPBACK_SWITCH, None)
    env.update(request.declared)
    env["GPUPOOL_NODE_NAME"], env["GPUPOOL_DATA_DIR"] = request.name, str(request.data_dir)
    env["GPUPOOL_NODE_LOST_SECONDS"] = str(answer["node_lost_seconds"])
    return env


def wait_schedulable(client: Client, request: JoinRequest, node: RayProcess) -> None:
    deadline = time.monotonic() + WAIT_SCHEDULABLE_S
    while time.monotonic() < deadline:
        status = client.join(request.token, request.name)
        if status.get("node_schedulable"):
            return
        if status.get("node_up") and not status.get("node_schedulable"):
            return  # up and drained by an admin: joined all the same
        if not node.alive():
            raise JoinError(f"the Ray node ended: {node.tail()}")
        time.sleep(0.1)
    node.stop()
    raise JoinError(
        f"the server did not see node {request.name} within {WAIT_SCHEDULABLE_S:g} s: look at "
        "the server's log and at the node's log in "
        f"{request.data_dir / 'cluster' / 'ray-node.log'}"
    )


def stay(joined: Joined, say: Callable[[str], None] = print) -> int:
    """Keep the node in the pool until SIGTERM or SIGINT, then stop it (0)."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    keeper = NodeKeeper(joined, say, stopping)
    while not stopping.wait(KEEP_INTERVAL_S):
        keeper.look()
    say("stopping the node")
    joined.node.stop()
    return 0


class NodeKeeper:
    """One look a second at the head and the node: stops the node's work once the head has
    been silent for ``lost_seconds``; starts the node again when it ended, and when the head
    comes back after it was gone (a head that went away comes back as a new cluster, since
    Ray keeps no state across a head restart without an external store: Ray itself would
    end the old node only a minute or so later)."""

    def __init__(
        self,
        joined: Joined,
        say: Callable[[str], None],
        stopping: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.joined, self.say, self.stopping, self.clock = joined, say, stopping, clock
        self.probe = HeadProbe(joined.head, clock=clock)
        self.head_gone = False
        self.work_stopped = False  # in this outage of the head
        self.ended_at: float | None = None  # when the Ray node was seen ended, or stopped
        self.next_start = 0.0
        self.backoff = RESTART_FIRST_S

    def look(self) -> None:
        head_answers = self.probe.look()
        if not head_answers:
            self.head_gone = True
            if not self.work_stopped and self.probe.lost_for() >= self.joined.lost_seconds:
                self.stop_work()
        elif self.head_gone:
            self.head_gone = self.work_stopped = False
            self.leave_old_cluster()
        if not self.joined.node.alive():
            self.restart(head_answers)

    def stop_work(self) -> None:
        """Stop what the node runs: the server takes it for lost from now on."""
        self.work_stopped = True
        stopped = stop_own_work(self.joined.request.data_dir / "jobs", LOST_GRACE_S)
        jobs = ", ".join(f"job {h.job_id} attempt {h.attempt}" for h in stopped) or "none"
        self.say(
            f"the Ray head at {self.joined.head} has not answered for "
            f"{self.probe.lost_for():.1f} s (the pool's limit is {self.joined.lost_seconds:g} "
            f"s): stopped this node's running work ({jobs}); its GPUs may go to other work"
        )

    def leave_old_cluster(self) -> None:
        """The head answers again after it was gone: the Ray node, of the cluster before,
        is stopped, to start anew at once."""
        if not self.joined.node.alive():
            return
        self.say("the Ray head answers again: starting this node's Ray node anew to join it")
        self.joined.node.stop()
        self.ended_at = self.next_start = self.clock()

    def restart(self, head_answers: bool) -> None:
        """The Ray node ended: clear what is left of it, and start it again once the head
        answers, waiting longer after each failed start."""
        if self.ended_at is None:
            self.ended_at = self.clock()
            self.next_start = self.ended_at + RESTART_FIRST_S
            why = "" if head_answers else " (the head does not answer)"
            self.say(f"the Ray node ended{why}; it starts again once the head answers")
            self.joined.node.stop()
        if head_answers and self.clock() >= self.next_start:
            self.start_again()

    def start_again(self) -> None:
        node = self.joined.node.again()
        try:
            node.start(RESTART_TIMEOUT_S, abort=self.stopping)
        except RayStartError as error:
            self.next_start = self.clock() + self.backoff
            why = last_line(error)
            self.say(f"the Ray node did not start ({why}); again in {self.backoff:g} s")
            self.backoff = min(self.backoff * 2, RESTART_LONGEST_S)
            return
        node.save(self.joined.record)
        self.joined.node = node
        self.say(
            f"the Ray node of {self.joined.request.name} joined the head at {self.joined.head} "
            f"again, {self.clock() - (self.ended_at or 0.0):.1f} s after it ended"
        )
        self.ended_at, self.backoff = None, RESTART_FIRST_S
