"""The runner's logic: claim the attempt, start the workload, pump its log, record its exit.

Standard library only, and only cheap modules (no pathlib, typing, dataclasses): this is
imported on every launch. One runner supervises exactly one workload process group; it outlives
the server and leaves everything an executor needs on disk (see ``gpupool.runner.layout``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import selectors
import signal
import subprocess
import sys
import time

from gpupool.runner.layout import (
    CODE_NOT_EXECUTABLE,
    CODE_NOT_FOUND,
    CODE_RUNNER_ERROR,
    EXIT_REFUSED,
    EXIT_USAGE,
    LOG_FILE,
    STARTED_FILE,
    STATE_FILE,
    STOP_FILE,
    atomic_write_json,
    notify,
    process_create_time,
    read_json,
)
from gpupool.runner.logsink import CappedLog
from gpupool.runner.spec import RunnerSpec, SpecError, load_spec

READ_CHUNK = 1 << 20  # bytes per os.read of the workload's pipe
PIPE_SIZE = 1 << 20  # asked of the kernel for the log pipe; best effort
DRAIN_SECONDS = 2.0  # after the workload exits: how long to wait for its pipe to close
IDLE_WAKE_SECONDS = 1.0  # safety net: re-check the workload even without a wake-up
FALLBACK_LOG_LIMIT = 1 << 20  # cap of output.log when spec.json cannot be read
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def main(argv: list[str]) -> int:
    """Run the attempt in ``argv[0]``; return the runner's own exit code (0: recorded)."""
    if len(argv) != 1:
        print("usage: python -m gpupool.runner ATTEMPT_DIR", file=sys.stderr)
        return EXIT_USAGE
    attempt_dir = argv[0]
    # A stop that arrives before the handlers are installed stays pending until then.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        claim(attempt_dir)
    except FileExistsError:
        print(
            f"gpupool runner: {attempt_dir} was already started; refusing to run it again",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    except OSError as e:
        print(f"gpupool runner: cannot claim {attempt_dir}: {e}", file=sys.stderr)
        return 1
    runner = Runner(attempt_dir)
    runner.install_signal_handlers()
    signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    return runner.run()


def claim(attempt_dir: str) -> None:
    """Create ATTEMPT_DIR/started exclusively: raises FileExistsError on a second start."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = os.open(os.path.join(attempt_dir, STARTED_FILE), flags, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)


class Runner:
    """Supervises one workload process group for one attempt directory."""

    def __init__(self, attempt_dir: str) -> None:
        self.dir = attempt_dir
        self.log: CappedLog | None = None
        self.record: dict[str, object] = {
            "runner_pid": os.getpid(),
            "runner_create_time": process_create_time(),
            "pid": None,
            "pgid": None,
            "started_at": None,
        }
        self.notify_fifo: str | None = None
        self.stop_requested = False
        self.stop_forwarded = False
        self.kill_deadline: float | None = None  # time.monotonic()
        self.killed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    # -- signals ------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Stop signals set a flag; every handled signal also wakes the select loop."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, self._on_child_signal)

    def _on_stop_signal(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def _on_child_signal(self, signum: int, frame: object) -> None:
        """Nothing to do here: the wake-up fd makes the loop check the workload."""

    def _drain_wake_fd(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    # -- the attempt ----------------------------------------------------------------------

    def run(self) -> int:
        """Do the whole attempt; 0 once an exit record is on disk."""
        proc: subprocess.Popen[bytes] | None = None
        try:
            spec = self._prepare()
            if spec is None:
                return 0
            launched = self._launch(spec)
            if launched is None:
                return 0
            proc, pipe_r = launched
            self._supervise(proc, pipe_r, spec)
            return 0 if self._record_exit(proc.returncode) else 1
        except Exception:
            import traceback  # only on this path: it is slow to import

            traceback.print_exc()
            if proc is not None:
                _signal_group(proc.pid, signal.SIGKILL)
            self._fail(CODE_RUNNER_ERROR, "internal runner error; see runner.log")
            return 1
        finally:
            if self.log is not None:
                self.log.close()

    def _prepare(self) -> RunnerSpec | None:
        """Load the spec and check what must hold before launching; record failures."""
        try:
            spec = load_spec(self.dir)
        except SpecError as e:
            self.log = CappedLog(self._path(LOG_FILE), FALLBACK_LOG_LIMIT)
            self._fail(CODE_RUNNER_ERROR, f"invalid attempt spec: {e}")
            return None
        self.notify_fifo = spec.notify_fifo
        self.log = CappedLog(self._path(LOG_FILE), spec.log_limit_bytes)
        for directory in (spec.checkpoint_dir, spec.output_dir):
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as e:
                self._fail(CODE_RUNNER_ERROR, f"cannot create {directory}: {e.strerror}")
                return None
        if spec.workdir is not None and not os.path.isdir(spec.workdir):
            self._fail(CODE_NOT_FOUND, f"working directory {spec.workdir} does not exist")
            return None
        if self.stop_requested or os.path.exists(self._path(STOP_FILE)):
            self._fail(128 + signal.SIGTERM, "stop requested before the workload started")
            return None
        return spec

    def _launch(self, spec: RunnerSpec) -> tuple[subprocess.Popen[bytes], int] | None:
        """Start the workload in its own session; return it and the read end of its pipe."""
        pipe_r, pipe_w = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        try:
            proc = subprocess.Popen(
                spec.command,
                stdin=subprocess.DEVNULL,
                stdout=pipe_w,
                stderr=pipe_w,
                env=spec.workload_env(),
                cwd=spec.workdir or spec.output_dir,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            os.close(pipe_r)
            self._fail(*_exec_failure(spec.command[0], e))
            return None
        finally:
            os.close(pipe_w)
        self.record.update(
            pid=proc.pid,
            pgid=proc.pid,  # a new session: the workload leads its own process group
            workload_create_time=process_create_time(proc.pid),
            started_at=time.time(),
        )
        self._write_state()
        return proc, pipe_r

    def _supervise(self, proc: subprocess.Popen[bytes], pipe_r: int, spec: RunnerSpec) -> None:
        """Pump the log and act on stops until the workload ended and its pipe is drained."""
        selector = selectors.DefaultSelector()
        selector.register(pipe_r, selectors.EVENT_READ, "log")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        pipe_open, drain_until = True, None
        while True:
            for key, _ in selector.select(self._select_timeout(drain_until)):
                if key.data == "wake":
                    self._drain_wake_fd()
                elif not self._pump(pipe_r):
                    selector.unregister(pipe_r)
                    pipe_open = False
            if drain_until is None:
                self._act_on_stop(proc.pid, spec)
                if _has_exited(proc.pid):
                    # The unreaped leader still holds the group id: kill what is left in it.
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
                    drain_until = time.monotonic() + DRAIN_SECONDS
            if drain_until is not None and (not pipe_open or time.monotonic() >= drain_until):
                break
        selector.close()
        os.close(pipe_r)

    def _pump(self, pipe_r: int) -> bool:
        """Move one chunk from the pipe to the log; False at end of file."""
        data = os.read(pipe_r, READ_CHUNK)
        if not data:
            return False
        assert self.log is not None
        self.log.write(data)
        return True

    def _select_timeout(self, drain_until: float | None) -> float:
        now = time.monotonic()
        timeout = IDLE_WAKE_SECONDS
        if self.kill_deadline is not None and not self.killed:
            timeout = min(timeout, self.kill_deadline - now)
        if drain_until is not None:
            timeout = min(timeout, drain_until - now)
        return max(timeout, 0.0)

    def _act_on_stop(self, pgid: int, spec: RunnerSpec) -> None:
        """SIGTERM the group once a stop is asked for, SIGKILL it when the grace is over."""
        assert self.log is not None
        if self.stop_requested and not self.stop_forwarded:
            self.stop_forwarded = True
            grace = self._stop_grace(spec)
            self.log.note(f"stop requested; sending SIGTERM to the workload (grace {grace:g} s)")
            _signal_group(pgid, signal.SIGTERM)
            self.kill_deadline = time.monotonic() + grace
        if (
            self.kill_deadline is not None
            and not self.killed
            and time.monotonic() >= self.kill_deadline
        ):
            self.killed = True
            self.log.note("grace period over; sending SIGKILL to the workload")
            _signal_group(pgid, signal.SIGKILL)

    def _stop_grace(self, spec: RunnerSpec) -> float:
        """stop.json's grace_seconds when present and valid, else the spec's."""
        stop = read_json(self._path(STOP_FILE)) or {}
        grace = stop.get("grace_seconds")
        if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
            return float(grace)
        return spec.stop_grace_seconds

    # -- records --------------------------------------------------------------------------

    def _record_exit(self, returncode: int) -> bool:
        if returncode < 0:
            self.record["signal"] = -returncode
            returncode = 128 - returncode
        self.record.update(
            exit_code=returncode, ended_at=time.time(), stop_requested=self.stop_forwarded
        )
        return self._write_state()

    def _fail(self, code: int, message: str) -> None:
        """Record that the workload could not run (or was not run), with a line in the log."""
        if self.log is not None:
            self.log.note(message)
        self.record.update(exit_code=code, ended_at=time.time(), message=message)
        self._write_state()

    def _write_state(self) -> bool:
        try:
            atomic_write_json(self._path(STATE_FILE), self.record)
        except OSError as e:
            print(f"gpupool runner: cannot write {STATE_FILE}: {e}", file=sys.stderr)
            return False
        notify(self.notify_fifo)
        return True


def _exec_failure(program: str, error: OSError) -> tuple[int, str]:
    """Exit code and log line for a workload that could not be executed."""
    if isinstance(error, FileNotFoundError):
        return CODE_NOT_FOUND, f"command not found: {program}"
    if isinstance(error, PermissionError):
        return CODE_NOT_EXECUTABLE, f"command is not executable: {program} (permission denied)"
    if error.errno == errno.ENOEXEC:
        return CODE_NOT_EXECUTABLE, f"command is not executable: {program} (exec format error)"
    return CODE_NOT_EXECUTABLE, f"cannot execute {program}: {error.strerror or error}"


def _has_exited(pid: int) -> bool:
    """True once the workload has ended, without reaping it (its group id stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
