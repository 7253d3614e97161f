"""Runs attempts on the nodes of a Ray pool, through each node's agent.

The agent launches the same runner in the same sandbox as the local executor, with the
records on its node's disk; this executor keeps the server's side: a copy of each attempt's
log under the server's ``jobs_dir`` (the log API reads it there, whole, after the attempt
ended), and what it last saw of each attempt, reported again while the cluster cannot be
asked (an attempt is never taken for lost because the head is away).

An agent that does not answer (its node is down) is given ``node_lost_seconds``: until then
its attempts are reported ORPHANED, so their GPUs stay held (the node may still be running
them: it stops its own work after that bound); after it, LOST.

The control loop learns of changes as it does on one machine, through ``change_fd``: a
thread per node with attempts waits in its agent's ``changes`` (the node's runners announce
each state change there, through the same FIFO as on one machine) and makes the descriptor
readable when one came; the loop's next pass then polls every node with one call each.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpupool.cluster.client import AgentUnavailable, CallFailed, ClusterClient, ClusterUnavailable
from gpupool.domain.code import CodeLimits
from gpupool.domain.endpoints import Endpoint
from gpupool.domain.isolation import IsolationStatus
from gpupool.errors import NoModelFiles, OutputsUnreachable
from gpupool.executors import images, outputs
from gpupool.executors.base import Capabilities, Executor, Handle, LaunchError, listening
from gpupool.executors.gang import (
    GangLog,
    combined,
    deciding,
    label,
    launch_count,
    launch_decides,
    launch_label,
    planned,
)
from gpupool.executors.outputs import Writable
from gpupool.executors.task import Observed, PollResult, TaskSpec, task_to_json
from gpupool.executors.usage import NodeFiles
from gpupool.runner import layout
from gpupool.settings import WILDCARD_ADDRESSES

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
# a start that needs an image the node has not unpacked unpacks it first (as one machine's
# start does): the call waits as long as an unpack may take, not a plain start's minute
IMAGE_START_TIMEOUT_S = START_TIMEOUT_S + images.UNPACK_TIMEOUT_S
# A node that lost the head stops its work node_lost_seconds after its last contact, with a
# grace of its own (cluster/lost.py): its GPUs are handed out only after that has passed too.
NODE_STOP_SLACK_S = 10.0
POLL_TIMEOUT_S = 10.0
PACK_TIMEOUT_S = 600.0  # packing a model version's files on their node
PARALLEL_POLLS = 16
STORAGE_TIMEOUT_S = 120.0  # a node walking its jobs' directories for the storage scan
HOLDINGS_TIMEOUT_S = 10.0  # a node listing its caches (a few directories)
# how long a gang found again without its record gives its other tasks to stop, once one
# ended (its job's own grace is in the record that was not written)
RECOVERED_GANG_GRACE_S = 10.0
CHANGES_WAIT_S = 10.0  # one wait of a node's watch in its agent (``NodeAgent.changes``)
WATCH_RETRY_S = 1.0  # a watch whose agent did not answer asks again after this


class RayExecutor(Executor):
    """``cluster``: the bridge to Ray; ``jobs_dir``: the server's copies of the logs;
    ``api_address``: where the nodes reach the server's API (``api_address``), told to each
    agent with each start so that its jobs find the API on their own loopback."""

    capabilities = Capabilities(multi_node=True)

    def __init__(
        self,
        cluster: ClusterClient,
        jobs_dir: Path,
        node_lost_seconds: float = 30.0,
        clock: Callable[[], float] = time.time,
        api_address: tuple[str, int] | None = None,
    ) -> None:
        self.cluster, self.jobs_dir = cluster, Path(jobs_dir)
        self.api_address = api_address
        self.node_lost_seconds, self.clock = node_lost_seconds, clock
        self._seen: dict[tuple[int, int], PollResult] = {}
        self._unanswered: dict[str, float] = {}  # node -> since when its agent has not answered
        self._fresh: dict[Key, bytes] = {}  # a gang task's log bytes not merged yet
        # (attempt, "log" or "metrics") -> the size of the server's copy, known since this
        # executor last appended to it: a poll whose node reports no more touches no file
        self._copied: dict[tuple[Key, str], int] = {}
        self._gang_logs: dict[Key, GangLog] = {}
        self._gangs_stopped: set[Key] = set()
        self._down: set[str] = set()  # nodes Ray reports dead (the node watch says)
        self._up: set[str] = set()  # nodes the node watch has seen up
        self.isolation_status: IsolationStatus | None = None
        self._files_seen: dict[str, NodeFiles] = {}  # node -> what its files took, last said
        self._changes: Changes | None = None  # made by the first change_fd()
        # node -> ended attempts released, told to its agent with its next poll (one call)
        self._releases: dict[str, list[dict[str, Any]]] = {}
        self._releases_lock = threading.Lock()

    # -- paths --------------------------------------------------------------------------------

    def log_path(self, handle: Handle) -> Path:
        return (
            self.jobs_dir / str(handle.job_id) / "attempts" / str(handle.attempt) / layout.LOG_FILE
        )

    def endpoint(self, handle: Handle) -> Endpoint | None:
        """Where the attempt listens, through its node agent's relay (a gang: its first
        task, on its node's network)."""
        state = handle.state
        if state.get("gang"):
            state = state["gang"][0]
        return listening(state)

    def isolation(self) -> IsolationStatus | None:
        return self.isolation_status

    # -- start --------------------------------------------------------------------------------

    def start(self, task: TaskSpec) -> Handle:
        sent = task_to_json(task)
        if self.api_address is not None:
            sent["api_address"] = list(self.api_address)
        if task.code and task.code_archive:  # the node has no access to the server's disk
            what = f"the job's code snapshot {task.code} is"
            sent["code_archive_data"] = _archive_data(task.code_archive, what, "code_missing")
        if task.model and task.model_archive:
            what = f"the model files {task.model} are"
            sent["model_archive_data"] = _archive_data(task.model_archive, what, "model_missing")
        try:
            timeout = IMAGE_START_TIMEOUT_S if task.image else START_TIMEOUT_S
            answer = self.cluster.call(task.node, "start", timeout=timeout, task=sent)
        except (ClusterUnavailable, AgentUnavailable) as error:
            raise _unreachable(task.node, error) from error
        except CallFailed as error:
            raise LaunchError(
                f"node {task.node} failed to launch: {error}",
                user_message=f"node {task.node} could not start the job's runner",
                reason="spawn_failed",
            ) from error
        if "error" in answer:
            error = answer["error"]
            raise LaunchError(
                error["log"], user_message=error["user_message"], reason=error["reason"]
            )
        self.log_path(Handle(task.job_id, task.attempt)).parent.mkdir(parents=True, exist_ok=True)
        if self._changes is not None:
            self._changes.watch(task.node)
        state = _task_state(task.node, answer["state"], answer.get("relay"))
        if answer.get("fabric"):
            state["fabric"] = answer["fabric"]
        return Handle(task.job_id, task.attempt, state)

    def start_gang(self, tasks: list[TaskSpec]) -> Handle:
        """Every task of the attempt on its node, all or none: a task that cannot start
        stops those started. The rendezvous port is one free on the first task's node; an
        MPI gang's tasks get one each on their own node (they serve the rsh agent there)."""
        try:
            port = self.cluster.call(tasks[0].node, "free_port")
            mpi = tasks[0].launcher == "mpi"
            ports = [self.cluster.call(t.node, "free_port") for t in tasks] if mpi else None
        except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
            raise _unreachable(tasks[0].node, error) from error
        tasks = planned(tasks, port, ports)
        started: list[Handle] = []
        try:
            for task in tasks:
                started.append(self.start(task))
        except LaunchError:
            for handle in started:
                self.stop(handle, 0.0)
            raise
        state = {
            "gang": [handle.state for handle in started],
            "labels": [label(task) for task in tasks],
            "deciders": [deciding(task) for task in tasks],
            "grace": tasks[0].stop_grace_seconds,
        }
        return Handle(tasks[0].job_id, tasks[0].attempt, state)

    def recover(self, job_id: int, attempt: int, node: str | None = None) -> Handle | None:
        """Ask the node (its first task's, for a gang) whether the attempt was launched
        before the server died. A gang's first task says how many tasks it has: the other
        nodes up are asked for theirs, and the gang is taken back whole; a gang found in part
        (the server died while starting it) has the tasks found stopped, and is not."""
        if node is None:
            return None
        state = self.cluster.call(node, "recover", job_id=job_id, attempt=attempt)
        if state is None:
            return None
        launch = state.pop("launch", None) or {}
        relay = state.pop("relay", None)
        count = launch_count(launch)
        first = (node, state, launch)
        if count <= 1:
            return Handle(job_id, attempt, _task_state(node, state, relay))
        found = [first, *self._recover_elsewhere(job_id, attempt, node)]
        tasks = {plan.get("task_index"): (name, local, plan) for name, local, plan in found}
        if sorted(tasks) != list(range(count)):
            self._stop_found(job_id, attempt, found, count)
            return None
        ordered = [tasks[index] for index in range(count)]
        return Handle(job_id, attempt, _gang_state(ordered))

    def _recover_elsewhere(
        self, job_id: int, attempt: int, first: str
    ) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """The attempt's tasks on the nodes up other than ``first``: (node, state, plan)."""
        found = []
        for node in sorted(self._up - self._down - {first}):
            try:
                state = self.cluster.call(node, "recover", job_id=job_id, attempt=attempt)
            except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
                log.warning("cannot ask node %s for job %s: %s", node, job_id, error)
                continue
            if state is not None:
                state.pop("relay", None)  # a gang's tasks serve on their nodes' network
                found.append((node, state, state.pop("launch", None) or {}))
        return found

    def _stop_found(
        self,
        job_id: int,
        attempt: int,
        found: list[tuple[str, dict[str, Any], dict[str, Any]]],
        count: int,
    ) -> None:
        """A gang found in part: its tasks found are stopped, so that none holds GPUs."""
        log.warning(
            "job %s attempt %s: %d of its %d tasks found after a restart; stopping them",
            job_id,
            attempt,
            len(found),
            count,
        )
        for node, state, _plan in found:
            with contextlib.suppress(ClusterUnavailable, AgentUnavailable, CallFailed):
                self.stop(Handle(job_id, attempt, _task_state(node, state)), 0.0)

    # -- poll ---------------------------------------------------------------------------------

    def poll(self, handle: Handle) -> PollResult:
        return self.poll_all([handle])[0]

    def poll_all(self, handles: list[Handle]) -> list[PollResult]:
        """One request per node for all its attempts (a gang's tasks with the rest), which
        also carries the attempts released there since the last one."""
        by_node: dict[str, list[Handle]] = {}
        for handle in handles:
            for task in _tasks(handle):
                by_node.setdefault(task.state["node"], []).append(task)
        if self._changes is not None:  # the nodes with attempts, and only they, are watched
            self._changes.watch_only(set(by_node))
        with self._releases_lock:
            releasing = [node for node in self._releases if node not in self._down]
        for node in releasing:  # a node with nothing running is asked only to release
            by_node.setdefault(node, [])
        results: dict[Key, PollResult] = {}
        if len(by_node) > 1:  # the nodes answer side by side
            with ThreadPoolExecutor(max_workers=min(len(by_node), PARALLEL_POLLS)) as pool:
                for found in pool.map(lambda item: self._poll_node(*item), by_node.items()):
                    results.update(found)
        else:
            for node, group in by_node.items():
                results.update(self._poll_node(node, group))
        return [self._result(handle, results) for handle in handles]

    def _result(self, handle: Handle, results: dict[Key, PollResult]) -> PollResult:
        """An attempt's state; a gang's from its tasks' (its log merged as it grows)."""
        if "gang" not in handle.state:
            return results[_key(handle)]
        tasks = _tasks(handle)
        seen = [results[_key(task)] for task in tasks]
        result, stop_rest = combined(seen, handle.state["deciders"])
        self._merge_logs(handle, tasks, seen)
        if stop_rest and _key(handle) not in self._gangs_stopped:
            self._gangs_stopped.add(_key(handle))
            for task, task_result in zip(tasks, seen, strict=True):
                if task_result.observed not in (Observed.EXITED, Observed.LOST):
                    self.stop(task, handle.state["grace"])
        return result

    def _merge_logs(self, handle: Handle, tasks: list[Handle], seen: list[PollResult]) -> None:
        merged = self._gang_logs.get(_key(handle))
        if merged is None:
            merged = self._gang_logs[_key(handle)] = GangLog(handle.state["labels"])
        out = b""
        for index, task in enumerate(tasks):
            out += merged.feed(index, self._fresh.pop(_key(task), b""))
            if seen[index].observed in (Observed.EXITED, Observed.LOST):
                out += merged.flush(index)
        if out:
            with open(self.log_path(handle), "ab") as combined_log:
                combined_log.write(out)

    def node_down(self, node: str) -> None:
        """Ray reports ``node`` dead: its attempts are not asked about (each ask would wait
        for a timeout) and its silence counts from now."""
        self._down.add(node)
        self._up.discard(node)
        self._unanswered.setdefault(node, self.clock())

    def node_up(self, node: str) -> None:
        self._down.discard(node)
        self._up.add(node)

    def _poll_node(self, node: str, handles: list[Handle]) -> dict[Key, PollResult]:
        if node in self._down:
            return {_key(h): self._node_silent(node, h, "Ray reports it dead") for h in handles}
        with self._releases_lock:
            released = self._releases.pop(node, [])
        asked: dict[str, Any] = {"handles": [_local(h) for h in handles]}
        if released:
            asked["released"] = released
        try:
            try:
                answers = self.cluster.call(node, "poll", timeout=POLL_TIMEOUT_S, **asked)
            except CallFailed:
                if not released:
                    raise
                # an agent made by an older server (it outlives the server) takes no
                # releases with its polls: they are sent one by one, as it expects
                answers = self.cluster.call(
                    node, "poll", timeout=POLL_TIMEOUT_S, handles=asked["handles"]
                )
                self._release_one_by_one(node, released)
        except ClusterUnavailable as error:
            _not_released(node, released, error)
            return {_key(h): self._last_seen(h) for h in handles}
        except AgentUnavailable as error:
            _not_released(node, released, error)
            return {_key(h): self._node_silent(node, h, str(error)) for h in handles}
        self._unanswered.pop(node, None)
        results = {}
        for handle, answer in zip(handles, answers, strict=True):
            result = _poll_from_json(answer)
            self._copy_log(handle, answer["log_size"])
            self._copy_metrics(handle, answer.get("metrics_size", 0))
            results[_key(handle)] = self._seen[_key(handle)] = result
        return results

    def _last_seen(self, handle: Handle) -> PollResult:
        return self._seen.get(_key(handle), PollResult(Observed.STARTING))

    def _node_silent(self, node: str, handle: Handle, why: str) -> PollResult:
        """The node's agent does not answer: fenced until the bound has passed, then lost."""
        since = self._unanswered.setdefault(node, self.clock())
        last = self._last_seen(handle)
        if self.clock() - since < self.node_lost_seconds + NODE_STOP_SLACK_S:
            message = (
                f"node {node} does not answer; its GPUs stay held until it has been silent for "
                f"{self.node_lost_seconds + NODE_STOP_SLACK_S:g} s (it stops its own work by then)"
            )
            return PollResult(Observed.ORPHANED, started_at=last.started_at, message=message)
        if last.observed == Observed.LOST:  # as first seen lost: when, and why
            return last
        message = f"node {node} was lost ({why.splitlines()[0] if why else 'no answer'})"
        lost = PollResult(
            Observed.LOST, started_at=last.started_at, ended_at=self.clock(), message=message
        )
        self._seen[_key(handle)] = lost
        return lost

    def _copy_log(self, handle: Handle, size: int) -> None:
        """Append what the node's log has beyond our copy. A gang's task has a copy of its
        own; what is new in it is kept for the attempt's merged log (``_merge_logs``)."""
        task = handle.state.get("task")
        path = self.log_path(handle)
        if task is not None:
            path = path.with_name(f"{layout.LOG_FILE}.task{task}")
        data = self._append_from_node(handle, path, size, "log")
        if task is not None and data:
            self._fresh[_key(handle)] = self._fresh.get(_key(handle), b"") + data

    def _copy_metrics(self, handle: Handle, size: int) -> None:
        """Append what the node's metric records have beyond our copy, as the log is copied
        (the server's ingester reads whole lines of it). Of a job over several nodes, the
        first task's (the node of rank 0, where training scripts report)."""
        if handle.state.get("task") not in (None, 0):
            return
        self._append_from_node(handle, self.metrics_path(handle), size, "metrics", metrics=True)

    def _append_from_node(
        self, handle: Handle, path: Path, size: int, what: str, **asked: object
    ) -> bytes:
        """Append to ``path`` what the node's copy (``size`` bytes; ``read_log`` with
        ``asked``) has beyond it; the bytes appended. A node that does not answer is logged
        and left for the next poll."""
        copied = self._copied.get((_key(handle), what))
        if copied is not None and size <= copied:
            return b""
        path.parent.mkdir(parents=True, exist_ok=True)
        appended = bytearray()
        with open(path, "ab") as copy:
            offset = copy.tell()
            self._copied[(_key(handle), what)] = offset
            while offset < size:
                try:
                    chunk = self.cluster.call(
                        handle.state["node"],
                        "read_log",
                        handle=_local(handle),
                        offset=offset,
                        **asked,
                    )
                except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
                    log.warning("cannot copy the %s of job %s: %s", what, handle.job_id, error)
                    break
                data = base64.b64decode(chunk["data"])
                if not data:
                    break
                copy.write(data)
                offset += len(data)
                appended += data
                self._copied[(_key(handle), what)] = offset
        return bytes(appended)

    # -- stop, release ------------------------------------------------------------------------

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        if "gang" in handle.state:
            for task in _tasks(handle):
                self.stop(task, grace_seconds)
            return
        if handle.state["node"] in self._down:  # it stops its own work (cluster/lost.py)
            return
        try:
            self.cluster.call(
                handle.state["node"], "stop", handle=_local(handle), grace_seconds=grace_seconds
            )
        except (ClusterUnavailable, AgentUnavailable) as error:
            # The node stops its own work once it has lost the head for node_lost_seconds.
            log.warning("cannot send the stop of job %s: %s", handle.job_id, error)

    def release(self, handle: Handle) -> None:
        if "gang" in handle.state:
            self._gang_logs.pop(_key(handle), None)
            self._gangs_stopped.discard(_key(handle))
            for task in _tasks(handle):
                self.release(task)
            return
        self._seen.pop(_key(handle), None)
        self._copied.pop((_key(handle), "log"), None)
        self._copied.pop((_key(handle), "metrics"), None)
        if handle.state["node"] in self._down:
            return
        with self._releases_lock:  # sent with the node's next poll (a lost one is logged)
            self._releases.setdefault(handle.state["node"], []).append(_local(handle))

    def _release_one_by_one(self, node: str, released: list[dict[str, Any]]) -> None:
        for local in released:
            try:
                self.cluster.call(node, "release", handle=local)
            except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
                _not_released(node, [local], error)

    def pack_outputs(
        self, job_id: int, node: str | None, path: str, limits: CodeLimits, into: Writable
    ) -> None:
        """Packed on the node that ran the job (its outputs stay there), fetched in chunks."""
        if node is None:
            raise NoModelFiles("the job never ran on a node, so it left no outputs")
        try:
            if node in self._down:
                raise AgentUnavailable("Ray reports the node dead")
            wanted = {"job_id": job_id, "path": path, "limits": asdict(limits)}
            answer = self.cluster.call(node, "pack_outputs", PACK_TIMEOUT_S, **wanted)
            if "error" in answer:
                raise outputs.error_from_json(answer["error"])
            self._fetch_pack(node, answer["pack"], answer["size"], into)
        except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
            raise OutputsUnreachable(
                f"node {node}, which holds the outputs of job {job_id}, cannot be reached now "
                f"({error}): try again once it is back (gpupool nodes)",
                node=node,
            ) from error

    def _fetch_pack(self, node: str, pack: str, size: int, into: Writable) -> None:
        try:
            offset = 0
            while offset < size:
                chunk = self.cluster.call(node, "read_pack", pack=pack, offset=offset)
                data = base64.b64decode(chunk["data"])
                if not data:
                    raise CallFailed(f"the pack ended at {offset} of {size} bytes")
                into.write(data)
                offset += len(data)
        finally:
            with contextlib.suppress(ClusterUnavailable, AgentUnavailable, CallFailed):
                self.cluster.call(node, "drop_pack", pack=pack)

    def holdings(self) -> dict[str, dict[str, int]]:
        """Each live node's agent lists its own caches, side by side; a node that does not
        answer is left out (what it said last stays recorded)."""
        try:
            nodes = [n["name"] for n in self.cluster.nodes() if n["name"] and n["alive"]]
        except (ClusterUnavailable, AgentUnavailable, CallFailed):
            return {}
        nodes = [node for node in nodes if node not in self._down]
        if not nodes:
            return {}
        with ThreadPoolExecutor(max_workers=min(len(nodes), PARALLEL_POLLS)) as pool:
            answers = zip(nodes, pool.map(self._held_by, nodes), strict=True)
        return {node: held for node, held in answers if held is not None}

    def _held_by(self, node: str) -> dict[str, int] | None:
        try:
            answer = self.cluster.call(node, "held", HOLDINGS_TIMEOUT_S)
        except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
            log.info("node %s did not say what it holds: %s", node, error)
            return None
        return {str(key): int(size) for key, size in answer.items()}

    def node_files(self, jobs: dict[int, bool], users: set[str]) -> NodeFiles:
        """Each live node's agent walks its own disk, side by side; a node that does not
        answer counts what it said last (its files did not go away with its agent)."""
        try:
            nodes = [n["name"] for n in self.cluster.nodes() if n["name"] and n["alive"]]
        except (ClusterUnavailable, AgentUnavailable, CallFailed):
            nodes = list(self._files_seen)
        asked = {"jobs": {str(job_id): done for job_id, done in jobs.items()}}
        asked["users"] = sorted(users)  # type: ignore[assignment]
        found = NodeFiles()
        if not nodes:
            return found
        with ThreadPoolExecutor(max_workers=min(len(nodes), PARALLEL_POLLS)) as pool:
            for files in pool.map(lambda node: self._files_of(node, asked), nodes):
                found.add(files)
        return found

    def _files_of(self, node: str, asked: dict[str, Any]) -> NodeFiles:
        if node not in self._down:
            try:
                answer = self.cluster.call(node, "storage", STORAGE_TIMEOUT_S, **asked)
                self._files_seen[node] = NodeFiles.from_json(answer)
            except (ClusterUnavailable, AgentUnavailable, CallFailed) as error:
                log.info("node %s did not say what its files take: %s", node, error)
        return self._files_seen.get(node, NodeFiles())

    def checkpoint_at(self, handle: Handle) -> float | None:
        if "gang" in handle.state:
            times = [self.checkpoint_at(task) for task in _tasks(handle)]
            return max((t for t in times if t is not None), default=None)
        if handle.state["node"] in self._down:
            return None
        try:
            return self.cluster.call(handle.state["node"], "checkpoint_at", handle=_local(handle))
        except (ClusterUnavailable, AgentUnavailable, CallFailed):
            return None

    def change_fd(self) -> int | None:
        """Readable when a runner on a watched node announced a change (see the module)."""
        if self._changes is None:
            self._changes = Changes(self.cluster, self._down)
        return self._changes.fd

    def clear_changes(self) -> None:
        if self._changes is not None:
            self._changes.clear()

    def close(self) -> None:
        if self._changes is not None:
            self._changes.close()
        self.cluster.close()


class Changes:
    """The node watches behind ``RayExecutor.change_fd``: per node, a thread that waits in
    its agent's ``changes`` and writes a byte into a pipe whenever the count it returns
    moved. ``down``: the nodes Ray reports dead (the executor's set), not waited on."""

    def __init__(self, cluster: ClusterClient, down: set[str]) -> None:
        self.cluster, self.down = cluster, down
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self._lock = threading.Lock()
        self._wanted: set[str] = set()
        self._threads: dict[str, threading.Thread] = {}
        self._closed = threading.Event()

    def watch(self, node: str) -> None:
        """Watch ``node`` (a launch there): until ``watch_only`` leaves it out."""
        with self._lock:
            if self._closed.is_set():
                return
            self._wanted.add(node)
            thread = self._threads.get(node)
            if thread is None or not thread.is_alive():
                thread = threading.Thread(
                    target=self._watch, args=(node,), name=f"gpupool-watch-{node}", daemon=True
                )
                self._threads[node] = thread
                thread.start()

    def watch_only(self, nodes: set[str]) -> None:
        """Watch these nodes; another's watch ends after its current wait (a node with no
        attempt is not asked: a removed node's agent is not made again by a watch)."""
        with self._lock:
            self._wanted &= nodes
        for node in nodes - self._wanted:
            self.watch(node)

    def _watch(self, node: str) -> None:
        seen = -1  # never a count: the first wait returns at once
        while not self._closed.is_set():
            with self._lock:
                if node not in self._wanted:
                    if self._threads.get(node) is threading.current_thread():
                        del self._threads[node]
                    return
            if node in self.down:
                self._closed.wait(WATCH_RETRY_S)
                continue
            try:
                count = self.cluster.call(
                    node,
                    "changes",
                    timeout=CHANGES_WAIT_S + POLL_TIMEOUT_S,
                    seen=seen,
                    wait_seconds=CHANGES_WAIT_S,
                )
            except (ClusterUnavailable, AgentUnavailable, CallFailed):
                self._closed.wait(WATCH_RETRY_S)
                continue
            if count != seen:
                if seen != -1:
                    self._ring()
                seen = count

    def _ring(self) -> None:
        with self._lock:
            if not self._closed.is_set():
                with contextlib.suppress(BlockingIOError):  # full: it is readable already
                    os.write(self._write_fd, b"!")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        with self._lock:
            self._closed.set()
            self._wanted.clear()
        os.close(self.fd)
        os.close(self._write_fd)


def api_address(host: str, port: int, head: str) -> tuple[str, int]:
    """Where the nodes reach the server's API: its own address, or its Ray head's host
    (``head``: host:port) when it listens on every address."""
    if host in WILDCARD_ADDRESSES:
        host = head.rpartition(":")[0].strip("[]")
    return host, port


def _archive_data(archive: str, what: str, reason: str) -> str:
    """An archive on the server's disk for the job's node (base64), which cannot read that
    disk: unpacked there as on one machine. ``what`` names it for the user when it is missing
    (LaunchError with ``reason``)."""
    try:
        return base64.b64encode(Path(archive).read_bytes()).decode("ascii")
    except OSError as error:
        message = f"{what} missing from the server's storage"
        raise LaunchError(f"{message}: {error}", user_message=message, reason=reason) from error


Key = tuple[int, int, str]


def _key(handle: Handle) -> Key:
    """An attempt's key; a gang's task's has its node (its tasks are on nodes of their own)."""
    return handle.job_id, handle.attempt, handle.state.get("node", "")


def _tasks(handle: Handle) -> list[Handle]:
    """A gang's tasks as handles of their own (each knows its index); else the handle."""
    if "gang" not in handle.state:
        return [handle]
    return [
        Handle(handle.job_id, handle.attempt, {**state, "task": index})
        for index, state in enumerate(handle.state["gang"])
    ]


def _task_state(
    node: str, local: dict[str, Any], relay: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A task's handle state from its node's state of it, and for one that serves through
    its runner's socket, how the server reaches it: ``relay`` (``cluster.relay``)."""
    if "socket" in local and not relay:  # its address is its own loopback: no way to it
        return {"node": node, "local": local}
    return {
        "node": node,
        "local": local,
        **_listening(local),
        **({"relay": relay} if relay else {}),
    }


def _gang_state(tasks: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """A gang's handle state, as ``start_gang`` makes it, from its tasks found again (in task
    order: node, state, launch plan); its stop grace is the default's, its job's unknown."""
    return {
        "gang": [_task_state(node, local) for node, local, _plan in tasks],
        "labels": [launch_label(plan, index) for index, (_n, _s, plan) in enumerate(tasks)],
        "deciders": [launch_decides(plan) for _node, _local, plan in tasks],
        "grace": RECOVERED_GANG_GRACE_S,
    }


def _listening(local: dict[str, Any]) -> dict[str, Any]:
    """Where a task that listens serves on its node (what its agent's executor chose), kept
    at the top of the handle's state, as the local executor's (services.jobs's endpoints read it).
    Its runner's socket is on its node: the server reaches it through the node's relay."""
    return {key: local[key] for key in ("host", "port") if key in local}


def _not_released(node: str, released: list[dict[str, Any]], error: Exception) -> None:
    """Released attempts whose poll did not reach their node: its agent, restarted or
    back, keeps their small records; the runners are gone already."""
    for local in released:
        log.info("cannot release job %s on node %s: %s", local["job_id"], node, error)


def _unreachable(node: str, error: Exception) -> LaunchError:
    return LaunchError(
        f"cannot reach node {node}: {error}",
        user_message=f"node {node} could not be reached; the job waits to start again",
        reason="node_unreachable",
    )


def _local(handle: Handle) -> dict[str, Any]:
    return {"job_id": handle.job_id, "attempt": handle.attempt, "state": handle.state["local"]}


def _poll_from_json(data: dict[str, Any]) -> PollResult:
    return PollResult(
        Observed(data["observed"]),
        exit_code=data.get("exit_code"),
        started_at=data.get("started_at"),
        ended_at=data.get("ended_at"),
        message=data.get("message"),
        reason=data.get("reason"),
        notes=tuple(data.get("notes") or ()),
    )
