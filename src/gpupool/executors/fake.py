"""Small executors for testing the parts of gpupool that drive executors.

* ``NeverStartsExecutor``: every attempt stays STARTING (a launch that hangs).
* ``FailingExecutor``: every start raises LaunchError.
* ``SlowStartExecutor``: a LocalExecutor whose launches happen ``delay`` seconds late.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import tempfile
import time
from pathlib import Path

from gpupool.domain.code import CodeLimits
from gpupool.executors import outputs
from gpupool.executors.base import Executor, Handle, LaunchError
from gpupool.executors.local import LocalExecutor
from gpupool.executors.outputs import Writable
from gpupool.executors.task import Observed, PollResult, TaskSpec
from gpupool.runner import layout

STOPPED_CODE = 128 + signal.SIGTERM


class NeverStartsExecutor(Executor):
    """Accepts every attempt and never starts it: poll() says STARTING forever.

    With ``exits_on_stop`` (the default) a stopped attempt then reports EXITED with code 143,
    as a real executor does for an attempt stopped before its workload began; without it,
    stop() is ignored too.
    """

    def __init__(self, root: Path | None = None, *, exits_on_stop: bool = True) -> None:
        self.root = Path(root) if root is not None else Path(tempfile.gettempdir()) / "gpupool-fake"
        self.exits_on_stop = exits_on_stop
        self.tasks: list[TaskSpec] = []

    def start(self, task: TaskSpec) -> Handle:
        self.tasks.append(task)
        return Handle(job_id=task.job_id, attempt=task.attempt, state={"stopped": False})

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        if self.exits_on_stop and not handle.state.get("stopped"):
            handle.state["stopped"] = True
            handle.state["ended_at"] = time.time()

    def poll(self, handle: Handle) -> PollResult:
        if handle.state.get("stopped"):
            return PollResult(
                Observed.EXITED,
                exit_code=STOPPED_CODE,
                ended_at=handle.state.get("ended_at"),
                message="stopped before the workload started",
            )
        return PollResult(Observed.STARTING)

    def log_path(self, handle: Handle) -> Path:
        return self.root / str(handle.job_id) / str(handle.attempt) / layout.LOG_FILE

    def pack_outputs(
        self, job_id: int, node: str | None, path: str, limits: CodeLimits, into: Writable
    ) -> None:
        """What a test put in ``root/<job_id>/outputs`` (its jobs never write any)."""
        outputs.pack(self.root / str(job_id) / "outputs", path, limits, into)


class FailingExecutor(Executor):
    """Every start() raises LaunchError with the given reason and messages."""

    def __init__(
        self,
        reason: str = "spawn_failed",
        user_message: str = "the node could not start the job",
        log_message: str = "FailingExecutor refuses every launch",
    ) -> None:
        self.reason = reason
        self.user_message = user_message
        self.log_message = log_message
        self.tasks: list[TaskSpec] = []

    def start(self, task: TaskSpec) -> Handle:
        self.tasks.append(task)
        raise LaunchError(self.log_message, user_message=self.user_message, reason=self.reason)

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        """Nothing was ever started."""

    def poll(self, handle: Handle) -> PollResult:
        return PollResult(Observed.LOST, message="FailingExecutor never starts anything")

    def log_path(self, handle: Handle) -> Path:
        return Path(tempfile.gettempdir()) / "gpupool-fake-failing" / layout.LOG_FILE


class SlowStartExecutor(Executor):
    """Wraps a LocalExecutor; each attempt is really launched ``delay`` seconds after start().

    Until then poll() says STARTING. The launch happens inside the first poll() after the
    delay. A stop() before the launch cancels it (poll() then says EXITED, code 143).
    """

    def __init__(
        self,
        delay: float,
        jobs_dir: Path,
        base_env: dict[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.delay = delay
        self.inner = LocalExecutor(jobs_dir, base_env=base_env, python=python)

    def start(self, task: TaskSpec) -> Handle:
        attempt_dir = self.inner.attempt_dir(task.job_id, task.attempt)
        if (attempt_dir / layout.SPEC_FILE).exists():
            raise LaunchError(
                f"attempt {attempt_dir} was already launched",
                user_message="this attempt was already started",
                reason="already_started",
            )
        state = {
            "attempt_dir": str(attempt_dir),
            "pending": dataclasses.asdict(task),
            "launch_at": time.time() + self.delay,
        }
        return Handle(job_id=task.job_id, attempt=task.attempt, state=state)

    def poll(self, handle: Handle) -> PollResult:
        state = handle.state
        if "pending" in state:
            if state.get("cancelled_at") is not None:
                return PollResult(
                    Observed.EXITED,
                    exit_code=STOPPED_CODE,
                    ended_at=state["cancelled_at"],
                    message="stopped before the workload started",
                )
            if time.time() < state["launch_at"]:
                return PollResult(Observed.STARTING)
            try:
                self._launch(handle)
            except LaunchError as e:
                return PollResult(Observed.LOST, message=e.user_message)
        return self.inner.poll(handle)

    def _launch(self, handle: Handle) -> None:
        task = TaskSpec(**handle.state["pending"])
        launched = self.inner.start(task)
        handle.state.clear()
        handle.state.update(launched.state)

    def stop(self, handle: Handle, grace_seconds: float) -> None:
        if "pending" in handle.state:
            handle.state.setdefault("cancelled_at", time.time())
            return
        self.inner.stop(handle, grace_seconds)

    def log_path(self, handle: Handle) -> Path:
        return self.inner.log_path(handle)

    def checkpoint_at(self, handle: Handle) -> float | None:
        return self.inner.checkpoint_at(handle)

    def release(self, handle: Handle) -> None:
        if "pending" not in handle.state:
            self.inner.release(handle)
