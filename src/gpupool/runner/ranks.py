"""Starts one task's processes inside its sandbox: ``python -m gpupool.runner.ranks PLAN.json``.

PLAN.json is a ``TaskLaunch`` as JSON (``gpupool.domain.launchers``); read here are
``processes`` (a non-empty list of ``{"argv": [str, ...], "env": {str: str},
"env_defaults": {str: str}, "rank": int | null}``) and ``files`` (``{relative path:
text}``); other keys are ignored. The files are written first, relative to the working
directory (absolute paths and ``..`` are refused). Each process gets this environment
overlaid with its ``env``, plus its ``env_defaults`` where neither sets the variable.

One process is exec'd in place: its output, exit code and signals are exactly the program's.
Several run as children in this process's group, so the runner's SIGTERM (sent to the group,
or to every process of the sandbox) reaches each rank once; the launcher does not forward
it again (a second SIGTERM cuts some programs' checkpointing short) and waits for them. Their
stdout and stderr come out as whole lines on this stdout, each prefixed ``[rank N] ``
(``[process I] `` without a rank). When a rank fails, the others get SIGTERM, then SIGKILL
after FAILURE_GRACE_SECONDS; the exit code is the first failure's (128 + N for signal N),
else 0. Standard library only (``gpupool.domain.ranklogs`` is too): it runs in the sandbox.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

from gpupool.domain.ranklogs import RankLogMerger, prefix, rank_label
from gpupool.runner.layout import CODE_NOT_EXECUTABLE, CODE_NOT_FOUND, CODE_RUNNER_ERROR, EXIT_USAGE

FAILURE_GRACE_SECONDS = 10.0  # after one rank failed: how long the others have to end
DRAIN_SECONDS = 2.0  # after every rank ended: how long their pipes may stay open (grandchildren)
IDLE_WAKE_SECONDS = 1.0  # safety net: re-check the ranks even without a wake-up
READ_CHUNK = 1 << 16
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# The ranks get SIGUSR1/2 through the group (some frameworks use them); the launcher must
# survive them to keep passing on their output. SIGCHLD only wakes the loop.
SURVIVED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)


class PlanError(Exception):
    """The launch plan cannot be run."""


def main(argv: list[str]) -> int:
    """Run the plan in ``argv[0]``; return the exit code the task should report."""
    if len(argv) != 1:
        _say("usage: python -m gpupool.runner.ranks PLAN.json")
        return EXIT_USAGE
    try:
        processes, files = load_plan(argv[0])
        write_files(files)
    except (PlanError, OSError, ValueError) as e:
        _say(f"gpupool: cannot launch {argv[0]}: {e}")
        return CODE_RUNNER_ERROR
    if len(processes) == 1:
        return exec_in_place(*processes[0][1:])
    return Ranks(processes).run()


def load_plan(path: str) -> tuple[list[tuple[str, list[str], dict[str, str]]], dict[str, str]]:
    """Each process as (label, argv, full environment), and the files to write."""
    with open(path, "rb") as f:
        plan = json.loads(f.read())
    specs = plan.get("processes") if isinstance(plan, dict) else None
    if not isinstance(specs, list) or not specs:
        raise PlanError("'processes' must be a non-empty list")
    processes = [_process(i, spec) for i, spec in enumerate(specs)]
    if len({label for label, _, _ in processes}) != len(processes):
        raise PlanError("two processes have the same rank")
    return processes, _strings(plan.get("files", {}), "'files'")


def write_files(files: dict[str, str]) -> None:
    """Write ``files`` under the working directory; refuse any path that would leave it."""
    for name in files:
        if not name or os.path.isabs(name) or ".." in name.split("/"):
            raise PlanError(f"file {name!r} must be a relative path inside the task, without '..'")
    for name, text in files.items():
        if os.path.dirname(name):
            os.makedirs(os.path.dirname(name), exist_ok=True)
        with open(name, "w", encoding="utf-8") as f:
            f.write(text)


def exec_in_place(argv: list[str], env: dict[str, str]) -> int:
    """Become the program; return only when it cannot be run (127 or 126, as a shell)."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; exec would keep that
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        code, message = _exec_failure(argv[0], e)
        _say(f"gpupool: {message}")
        return code


class Ranks:
    """Several processes of one task: their merged output and the exit policy."""

    def __init__(self, processes: list[tuple[str, list[str], dict[str, str]]]) -> None:
        self.processes = processes
        self.children: list[tuple[subprocess.Popen[bytes], str]] = []
        self.exit_code: int | None = None  # the first failure's
        self.stop_signal: int | None = None  # the stop that reached the launcher (and ranks)
        self.kill_at: float | None = None  # time.monotonic() when the survivors get SIGKILL
        self.merger = RankLogMerger()
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)

    def run(self) -> int:
        """Start every process, pump their output until they ended; the task's exit code."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)
        for sig in SURVIVED_SIGNALS:
            signal.signal(sig, lambda signum, frame: None)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._start_all()
        self._supervise()
        self._emit(self.merger.flush())
        return self.exit_code or 0

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop_signal = signum

    def _start_all(self) -> None:
        for label, argv, env in self.processes:
            if self.stop_signal is not None and self.exit_code is None:
                self.exit_code = 128 + self.stop_signal  # stopped before every rank started
            if self.exit_code is not None:
                return
            read_fd, write_fd = os.pipe()
            try:
                child = subprocess.Popen(argv, stdout=write_fd, stderr=write_fd, env=env)
            except OSError as e:
                os.close(read_fd)
                code, message = _exec_failure(argv[0], e)
                self._emit([f"{prefix(label)}gpupool: {message}\n"])
                self._failed(code)
                return
            finally:
                os.close(write_fd)
            self.children.append((child, label))
            self.selector.register(read_fd, selectors.EVENT_READ, label)

    def _supervise(self) -> None:
        drain_until = None
        while True:
            self._reap()
            self._kill_after_grace()
            if drain_until is None and not self._alive():
                drain_until = time.monotonic() + DRAIN_SECONDS
            open_pipes = len(self.selector.get_map()) - 1  # the wake-up pipe stays
            if drain_until is not None and (not open_pipes or time.monotonic() >= drain_until):
                return
            for key, _ in self.selector.select(self._timeout(drain_until)):
                self._pump(key)

    def _reap(self) -> None:
        for child, _ in self._alive():
            code = child.poll()
            if code is not None and code != 0 and self.exit_code is None:
                self._failed(128 - code if code < 0 else code)

    def _failed(self, code: int) -> None:
        """The first failure: the task ends with ``code``; stop the other ranks (unless a
        stop already reached them all through the group)."""
        self.exit_code = code
        if self.stop_signal is not None:
            return
        for child, _ in self._alive():
            child.send_signal(signal.SIGTERM)
        self.kill_at = time.monotonic() + FAILURE_GRACE_SECONDS

    def _kill_after_grace(self) -> None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.kill_at = None
            for child, _ in self._alive():
                child.kill()

    def _alive(self) -> list[tuple[subprocess.Popen[bytes], str]]:
        return [(child, label) for child, label in self.children if child.returncode is None]

    def _timeout(self, drain_until: float | None) -> float:
        deadlines = [t for t in (self.kill_at, drain_until) if t is not None]
        wait = min([IDLE_WAKE_SECONDS, *(t - time.monotonic() for t in deadlines)])
        return max(wait, 0.0)

    def _pump(self, key: selectors.SelectorKey) -> None:
        """Pass on one chunk of a rank's output as whole prefixed lines (all at its end)."""
        data = os.read(key.fd, READ_CHUNK)
        if key.data is None:  # the wake-up pipe: a signal came; the loop re-checks all
            return
        if data:
            self._emit(self.merger.feed(key.data, data))
            return
        self.selector.unregister(key.fd)
        os.close(key.fd)
        self._emit(self.merger.flush(key.data))

    def _emit(self, lines: list[str]) -> None:
        view = memoryview("".join(lines).encode())
        try:
            while view:
                view = view[os.write(1, view) :]
        except BrokenPipeError:
            pass  # nobody reads the log any more: the ranks still get their exit policy


def _process(index: int, spec: object) -> tuple[str, list[str], dict[str, str]]:
    if not isinstance(spec, dict):
        raise PlanError(f"process {index} must be a JSON object")
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise PlanError(f"process {index}: 'argv' must be a non-empty list of strings")
    rank = spec.get("rank")
    if rank is not None and (type(rank) is not int or rank < 0):
        raise PlanError(f"process {index}: 'rank' must be a whole number >= 0 or null")
    defaults = _strings(spec.get("env_defaults", {}), f"process {index}: 'env_defaults'")
    env = {**defaults, **os.environ, **_strings(spec.get("env", {}), f"process {index}: 'env'")}
    return (rank_label(rank) if rank is not None else f"process {index}"), argv, env


def _strings(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise PlanError(f"{what} must map names to strings")
    return value


def _exec_failure(program: str, error: OSError) -> tuple[int, str]:
    if isinstance(error, FileNotFoundError):
        return CODE_NOT_FOUND, f"command not found: {program}"
    return CODE_NOT_EXECUTABLE, f"cannot run {program}: {error.strerror or error}"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
