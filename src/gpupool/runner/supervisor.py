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
import select
import selectors
import signal
import subprocess
import sys
import time

from gpupool.runner import cgroups, gpusamples, metricsink, network, sandbox, tenancy
from gpupool.runner.layout import (
    CODE_NOT_EXECUTABLE,
    CODE_NOT_FOUND,
    CODE_RUNNER_ERROR,
    EXIT_REFUSED,
    EXIT_USAGE,
    LOG_FILE,
    METRICS_FILE,
    STARTED_FILE,
    STATE_FILE,
    STOP_FILE,
    atomic_write_json,
    notify,
    process_create_time,
    read_json,
    sync,
)
from gpupool.runner.logsink import CappedLog
from gpupool.runner.wire import RunnerSpec, SpecError, load_spec
from gpupool.runner.workload import Direct, Sandboxed

READ_CHUNK = 1 << 20  # bytes per os.read of the workload's pipe
PIPE_SIZE = 1 << 20  # asked of the kernel for the log pipe; best effort
DRAIN_SECONDS = 2.0  # after the workload exits: how long to wait for its pipe to close
IDLE_WAKE_SECONDS = 1.0  # safety net: re-check the workload even without a wake-up
FALLBACK_LOG_LIMIT = 1 << 20  # cap of output.log when spec.json cannot be read
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
SANDBOX_REPORT_SECONDS = 10.0  # how long bwrap may take to report its sandbox
GPU_SAMPLE_SECONDS = 1.0  # how often a fractional job's GPU memory is looked at
RECORD_RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)  # an exit record that cannot be written yet
PIDS_CHECK_SECONDS = 0.5  # how often the cgroup is asked whether a fork was refused


def main(argv: list[str], warm=None) -> int:  # noqa: ANN001 - warm: a warmnet.Slot
    """Run the attempt in ``argv[0]``; return the runner's own exit code (0: recorded).
    ``warm``: a network namespace the fork server made ready, now this runner's to use for
    a workload with a network of its own, or to discard."""
    if warm is not None:
        warm.own()  # first: from here on a sweep sees its pasta as this runner's
    if len(argv) != 1:
        print("usage: python -m gpupool.runner ATTEMPT_DIR", file=sys.stderr)
        return _discarded(warm, EXIT_USAGE)
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
        return _discarded(warm, EXIT_REFUSED)
    except OSError as e:
        print(f"gpupool runner: cannot claim {attempt_dir}: {e}", file=sys.stderr)
        return _discarded(warm, 1)
    runner = Runner(attempt_dir, warm)
    runner.install_signal_handlers()
    signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    return runner.run()


def _discarded(warm, code: int) -> int:  # noqa: ANN001
    if warm is not None:
        warm.discard()
    return code


def claim(attempt_dir: str) -> None:
    """Create ATTEMPT_DIR/started exclusively: raises FileExistsError on a second start."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = os.open(os.path.join(attempt_dir, STARTED_FILE), flags, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
    finally:
        os.close(fd)


class Runner:
    """Supervises one workload (a process group, or a sandbox) for one attempt directory."""

    def __init__(self, attempt_dir: str, warm=None) -> None:  # noqa: ANN001
        self.dir = attempt_dir
        self.warm = warm  # a warm network namespace not yet handed to self.network
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
        self.cgroup: cgroups.Cgroup | None = None
        self.gpu_watch = None  # gpumemory.GpuMemoryWatch for fractional jobs
        self.next_gpu_sample = 0.0
        self.next_pids_check = 0.0
        self.exceeded: dict[str, object] | None = None
        self.metrics: metricsink.MetricSink | None = None
        self.network: network.Network | None = None  # the workload's own namespace
        self.fence = None  # fence.Fence: a gang task's part of the node's fence
        # the job's environment, held (a shared lock) while it runs: never collected then
        self.environment_lock: int | None = None
        # the dataset versions it reads, held (shared locks) while it runs: never collected then
        self.dataset_locks: list[int] = []
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
        workload = None
        try:
            spec = self._prepare()
            if spec is None:
                return 0
            if spec.environment is not None and not self._environment_ready(spec):
                return 0
            if spec.datasets and not self._datasets_ready(spec):
                return 0
            launched = self._launch(spec)
            if launched is None:
                return 0
            workload, pipe_r, status_r = launched
            self._supervise(workload, pipe_r, status_r, spec)
            self._close_metrics()
            code = workload.reap()
            recorded = self._record_exit(code, spec.memory_bytes, spec.pids_max, spec.account)
            return 0 if recorded else 1
        except Exception:
            import traceback  # only on this path: it is slow to import

            traceback.print_exc()
            if workload is not None:
                workload.kill()
            self._fail(CODE_RUNNER_ERROR, "internal runner error; see runner.log")
            return 1
        finally:
            self._close_metrics()
            self._close_network()
            if self.warm is not None:  # not used: this workload needed none, or failed first
                self.warm.discard()
                self.warm = None
            self._close_cgroup()
            self._close_fence()
            if self.environment_lock is not None:
                os.close(self.environment_lock)
            for lock in self.dataset_locks:  # its versions, held shared while it ran
                os.close(lock)
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
        problem = tenancy.prepare_dirs(spec) or tenancy.check_workdir(spec)
        if problem is not None:
            self._fail(*problem)
            return None
        if self.stop_requested or os.path.exists(self._path(STOP_FILE)):
            self._fail(128 + signal.SIGTERM, "stop requested before the workload started")
            return None
        return spec

    def _environment_ready(self, spec: RunnerSpec) -> bool:
        """Build the job's environment on this node if it is not there yet (a first job of
        it here); False, with the failure recorded, when it cannot be had."""
        from gpupool.runner import envbuild  # only for jobs with an environment

        def stopped() -> bool:
            return self.stop_requested or os.path.exists(self._path(STOP_FILE))

        problem, self.environment_lock = envbuild.ensure(
            spec.environment, spec.sandbox, self.dir, self.log, stopped
        )
        if problem is not None:
            self._fail(*problem)
            return False
        return True

    def _datasets_ready(self, spec: RunnerSpec) -> bool:
        """Materialise the dataset versions the job reads in this node's cache where they
        are not yet (reason DatasetFetching meanwhile); False, with the failure recorded,
        when one cannot be had."""
        from gpupool.runner import datasets  # only for jobs that read datasets

        def stopped() -> bool:
            return self.stop_requested or os.path.exists(self._path(STOP_FILE))

        problem, self.dataset_locks = datasets.ensure(spec.datasets, self.dir, stopped, self.log)
        if problem is not None:
            self._fail(*problem)
            return False
        return True

    def _launch(self, spec: RunnerSpec):  # noqa: ANN202 - (workload, log pipe, status pipe)
        """Start the workload in its own session; return it and the read ends of its pipes."""
        env = tenancy.workload_env(spec)
        missing = tenancy.missing_program(spec, env)
        if missing is not None:
            self._fail(*missing)
            return None
        self._limit(spec)
        self._apply_fence(spec)
        self._open_metrics(spec)
        pipe_r, pipe_w = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        try:
            if spec.sandbox is None:
                workload, status_r = self._start_direct(spec, env, pipe_w), None
            else:
                workload, status_r = self._start_sandboxed(spec, env, pipe_w)
        except OSError as e:
            os.close(pipe_r)
            self._fail(*_exec_failure(spec.command[0], e))
            return None
        finally:
            os.close(pipe_w)
        self.record.update(
            pid=workload.proc.pid,
            pgid=workload.proc.pid,  # a new session: the workload leads its own process group
            workload_create_time=process_create_time(workload.proc.pid),
        )
        if status_r is not None:
            self._enter_sandbox(workload, status_r, spec)
            self._network_ready()
        self.record["started_at"] = time.time()
        self._write_state()
        if status_r is not None:
            workload.release()  # recorded: now the job may run
        return workload, pipe_r, status_r

    def _enter_sandbox(self, workload: Sandboxed, status_r: int, spec: RunnerSpec) -> None:
        """Wait for bwrap to report its sandbox (it waits for us before the job runs), put
        the sandbox in the attempt's cgroup, and record both in one write."""
        deadline = time.monotonic() + SANDBOX_REPORT_SECONDS
        while workload.init_pid is None and time.monotonic() < deadline:
            ready, _, _ = select.select([status_r], [], [], deadline - time.monotonic())
            data = os.read(status_r, 4096) if ready else b""
            if not data:
                break  # bwrap failed before making the sandbox: its exit and log tell
            workload.on_status(data)
        if workload.init_pid is not None:
            self._attach_network(spec, workload.init_pid)
        if self.cgroup is not None and workload.init_pid is not None:
            try:
                self.cgroup.join(workload.init_pid)
            except OSError as e:
                notes = self.record.setdefault("notes", [])
                notes.append(f"CPU, memory and task limits are not enforced: cannot join: {e}")
        self.record.update(workload.record())

    def _attach_network(self, spec: RunnerSpec, init_pid: int) -> None:
        """Egress and the bridge for a sandbox with a network namespace of its own, started
        while the sandbox waits (pasta configures it side by side with the recording)."""
        policy = spec.sandbox.network  # type: ignore[attr-defined]
        if not policy.isolated:
            return
        userns = sandbox.makes_user_namespace(spec.account)
        warm, self.warm = self.warm, None  # the namespace bwrap was started in, if warm
        self.network = network.Network(policy, self.dir, userns, warm)
        self.network.attach(init_pid)
        self.record.update(self.network.record())

    def _network_ready(self) -> None:
        if self.network is None:
            return
        self.network.ready()
        if self.network.notes:
            self.record.setdefault("notes", []).extend(self.network.notes)

    def _start_bridge(self) -> None:
        """The bridge of a root runner, forked at the first connection to one of its
        listeners (which wait, with the connection in their backlog, until it serves
        them): most jobs never call the API nor serve, and pay no fork for it."""
        if self.network is not None and self.network.start_bridge():
            self.record.update(self.network.record())
            self._write_state()  # its pid, for whoever looks (the job runs meanwhile)

    def _close_network(self, account: dict[str, object] | None = None) -> None:
        """Stop the workload's network; with ``account`` (the workload ended, its cgroup
        is empty) a warm namespace may go back to the fork server for that account."""
        if self.network is not None:
            net, self.network = self.network, None
            net.close(None if account is None else str(account["uid"]))

    def _limit(self, spec: RunnerSpec) -> None:
        """A cgroup for the CPUs, memory and tasks the spec allows, a GPU memory watch for a
        fraction; what cannot be enforced is recorded, for the job's events."""
        notes = []
        limits = (spec.cpus, spec.memory_bytes, spec.pids_max)
        self.cgroup, why = cgroups.create(spec.cgroup_name(), *limits)
        if self.cgroup is not None:
            self.record["cgroup"] = self.cgroup.as_json()
        elif why:
            notes.append(f"CPU, memory and task limits are not enforced: {why}")
        if spec.gpu_memory is not None:
            self.gpu_watch, why = tenancy.gpu_memory_watch(spec.gpu_memory)
            if why:
                notes.append(f"the GPU memory share is not enforced: {why}")
        if spec.sandbox is not None and (why := sandbox.shm_note(spec.sandbox)):
            notes.append(why)
        if notes:
            self.record["notes"] = notes

    def _apply_fence(self, spec: RunnerSpec) -> None:
        """A task of a gang over several nodes (on the node's network): its part of the
        node's fence, before it runs; what cannot be enforced is noted for its events."""
        if spec.fence is None:
            return
        from gpupool.runner.fence import Fence

        owner = spec.account["uid"] if spec.account else None
        self.fence = Fence(spec.fence, spec.cgroup_name(), owner)  # type: ignore[arg-type]
        self.fence.apply()
        if self.fence.notes:
            self.record.setdefault("notes", []).extend(self.fence.notes)

    def _close_fence(self) -> None:
        if self.fence is not None:
            fence, self.fence = self.fence, None
            fence.close()

    def _start_direct(self, spec: RunnerSpec, env: dict[str, str], pipe_w: int) -> Direct:
        proc = subprocess.Popen(
            spec.command,
            stdin=subprocess.DEVNULL,
            stdout=pipe_w,
            stderr=pipe_w,
            env=env,
            cwd=spec.cwd(),
            start_new_session=True,
            close_fds=True,
            preexec_fn=tenancy.preexec(self.cgroup, spec.account),
        )
        return Direct(proc, self.cgroup)

    def _start_sandboxed(self, spec: RunnerSpec, env: dict[str, str], pipe_w: int):  # noqa: ANN202
        env_fd = os.memfd_create("gpupool-env")
        status_r, status_w = os.pipe()
        block_r, block_w = os.pipe()  # bwrap waits on it before it starts the job
        try:
            os.write(env_fd, sandbox.env_file(env))
            os.lseek(env_fd, 0, os.SEEK_SET)
            warm = self._warm_network(spec)
            argv = tenancy.sandbox_argv(
                spec, env_fd, status_w, block_r, self.cgroup, network_given=warm is not None
            )

            def spawn() -> subprocess.Popen[bytes]:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=pipe_w,
                    stderr=pipe_w,
                    env={},
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(env_fd, status_w, block_r),
                )

            if warm is None:
                proc = spawn()
            else:
                from gpupool.runner import warmnet

                proc = warmnet.spawn_in(warm.fd, spawn)
        except BaseException:
            os.close(status_r)
            os.close(block_w)
            raise
        finally:
            os.close(env_fd)
            os.close(status_w)
            os.close(block_r)
        return Sandboxed(proc, self.cgroup, block_w), status_r

    def _warm_network(self, spec: RunnerSpec):  # noqa: ANN202 - warmnet.Slot | None
        """The warm namespace to start the sandbox in, if this workload has a network of
        its own with egress and pasta configured that namespace; else it is discarded
        (the runner makes the namespace itself, as without one)."""
        warm, policy = self.warm, spec.sandbox.network  # type: ignore[union-attr]
        if warm is None:
            return None
        usable = policy.isolated and policy.egress is not None
        if usable and not sandbox.makes_user_namespace(spec.account) and warm.wait_ready():
            return warm
        self.warm = None
        warm.discard()
        return None

    def _supervise(self, workload, pipe_r: int, status_r: int | None, spec: RunnerSpec) -> None:  # noqa: ANN001
        """Pump the log and act on stops until the workload ended and its pipe is drained."""
        selector = selectors.DefaultSelector()
        selector.register(pipe_r, selectors.EVENT_READ, "log")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if status_r is not None:
            selector.register(status_r, selectors.EVENT_READ, "status")
        waiting = self.network.listeners() if self.network is not None else []
        for fd in waiting:
            selector.register(fd, selectors.EVENT_READ, "bridge")
        pipe_open, drain_until = True, None
        while True:
            for key, _ in selector.select(self._select_timeout(drain_until)):
                if key.data == "wake":
                    self._drain_wake_fd()
                elif key.data == "bridge":
                    for fd in waiting:
                        selector.unregister(fd)
                    waiting = []
                    self._start_bridge()
                elif key.data == "status":
                    if not self._read_status(workload, status_r):
                        selector.unregister(status_r)
                elif not self._pump(pipe_r):
                    selector.unregister(pipe_r)
                    pipe_open = False
            if drain_until is None:
                self._act_on_stop(workload, spec)
                self._watch_gpu_memory(workload)
                self._watch_pids(workload, spec.pids_max)
                if self.metrics is not None:
                    self.metrics.poll(time.monotonic(), time.time())
                if workload.has_exited():
                    drain_until = time.monotonic() + DRAIN_SECONDS
            if drain_until is not None and (not pipe_open or time.monotonic() >= drain_until):
                break
        selector.close()
        os.close(pipe_r)
        if status_r is not None:
            os.close(status_r)

    def _read_status(self, workload, status_r: int) -> bool:  # noqa: ANN001
        """Take in bwrap's status; record the sandbox once its namespace is known."""
        data = os.read(status_r, 4096)
        if not data:
            return False
        known = workload.record()
        workload.on_status(data)
        if workload.record() != known:
            self.record.update(workload.record())
            self._write_state()
        return True

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
        if self.gpu_watch is not None:
            timeout = min(timeout, self.next_gpu_sample - now)
        if self.metrics is not None:
            timeout = min(timeout, self.metrics.due(now))
        if drain_until is not None:
            timeout = min(timeout, drain_until - now)
        return max(timeout, 0.0)

    def _act_on_stop(self, workload, spec: RunnerSpec) -> None:  # noqa: ANN001
        """SIGTERM the workload once a stop is asked for, SIGKILL it when the grace is over."""
        assert self.log is not None
        if self.stop_requested and not self.stop_forwarded:
            self.stop_forwarded = True
            grace = self._stop_grace(spec)
            self.log.note(f"stop requested; sending SIGTERM to the workload (grace {grace:g} s)")
            workload.stop(signal.SIGTERM)
            self.kill_deadline = time.monotonic() + grace
        if (
            self.kill_deadline is not None
            and not self.killed
            and time.monotonic() >= self.kill_deadline
        ):
            self.killed = True
            self.log.note("grace period over; sending SIGKILL to the workload")
            workload.kill()

    def _watch_gpu_memory(self, workload) -> None:  # noqa: ANN001
        """Stop a fractional job that stayed over its GPU memory share for its grace."""
        now = time.monotonic()
        if self.gpu_watch is None or self.exceeded is not None or now < self.next_gpu_sample:
            return
        self.next_gpu_sample = now + GPU_SAMPLE_SECONDS
        excess = self.gpu_watch.check(now, workload.belongs)
        if excess is not None:
            self.exceeded = excess
            assert self.log is not None
            self.log.note(str(excess["message"]))
            workload.kill()

    def _watch_pids(self, workload, limit: int | None) -> None:  # noqa: ANN001
        """End a job whose forks the kernel refused at its task limit (a fork bomb): it would
        otherwise spin there, holding its CPUs, while nothing it tries can start."""
        now = time.monotonic()
        if self.cgroup is None or self.exceeded is not None or now < self.next_pids_check:
            return
        self.next_pids_check = now + PIDS_CHECK_SECONDS
        excess = pids_excess(self.cgroup, limit)
        if excess is not None:
            self.exceeded = excess
            assert self.log is not None
            self.log.note(str(excess["message"]))
            workload.kill()

    def _close_cgroup(self) -> None:
        """Kill what the attempt left in its cgroup and remove it (once, before the exit
        is recorded, so that an ended job holds none)."""
        if self.cgroup is not None:
            cgroup, self.cgroup = self.cgroup, None
            cgroup.close()

    def _open_metrics(self, spec: RunnerSpec) -> None:
        """Create the file the job writes its metrics to, and follow it (GPU samples too)."""
        assert self.log is not None
        problem = metricsink.prepare(spec.metrics_file(), spec.account)
        if problem is not None:
            self.log.note(f"metrics are not forwarded: {problem}")
            return
        devices = gpusamples.devices(spec.gpu_sampler)
        records = self._path(METRICS_FILE)
        self.metrics = metricsink.MetricSink(
            spec.metrics_file(), records, self.log.note, spec.gpu_uuids, devices
        )

    def _close_metrics(self) -> None:
        """Take in the job's last lines before its exit is recorded (the server reads the
        records to their end once it sees the exit)."""
        if self.metrics is not None:
            metrics, self.metrics = self.metrics, None
            metrics.close(time.time())

    def _stop_grace(self, spec: RunnerSpec) -> float:
        """stop.json's grace_seconds when present and valid, else the spec's."""
        stop = read_json(self._path(STOP_FILE)) or {}
        grace = stop.get("grace_seconds")
        if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
            return float(grace)
        return spec.stop_grace_seconds

    # -- records --------------------------------------------------------------------------

    def _record_exit(
        self,
        returncode: int,
        spec_memory: int | None = None,
        pids_max: int | None = None,
        account: dict[str, object] | None = None,
    ) -> bool:
        """Record how the workload ended; keep trying while the disk is full."""
        if returncode < 0:
            self.record["signal"] = -returncode
            returncode = 128 - returncode
        elif returncode > 128 and self.record.get("sandbox") is not None:
            self.record["signal"] = returncode - 128  # bwrap reports a signal as 128 + N
        self.record.update(
            exit_code=returncode, ended_at=time.time(), stop_requested=self.stop_forwarded
        )
        self._note_excess(returncode, spec_memory, pids_max)
        self._close_cgroup()
        # before the record: the server launches the next job once it reads it, and the
        # namespace is that job's if given back by then
        self._close_network(account)
        return self._write_state(retry=True)

    def _note_excess(self, returncode: int, limit: int | None, pids_max: int | None) -> None:
        """Say why the job was stopped: over its GPU memory share, out of host memory, or
        at its task limit."""
        excess = self.exceeded
        if excess is None and returncode != 0 and self.cgroup is not None:
            excess = tenancy.memory_excess(self.cgroup, limit)
            excess = excess or pids_excess(self.cgroup, pids_max)
            if excess is not None and self.log is not None:
                self.log.note(str(excess["message"]))
        if excess is not None:
            self.record["exceeded"] = excess
            self.record["message"] = excess["message"]

    def _fail(self, code: int, message: str) -> None:
        """Record that the workload could not run (or was not run), with a line in the log."""
        if self.log is not None:
            self.log.note(message)
        self.record.update(exit_code=code, ended_at=time.time(), message=message)
        self._write_state(retry=True)

    def _write_state(self, retry: bool = False) -> bool:
        """Write state.json. An exit record (``retry``) is retried until it is written: the
        disk may be full for a while, and the job's real exit code must reach the server.
        It alone is synced to disk, once the server was told (the server's commit is what
        lasts; the sync only covers a crash of the machine before the server read it, and
        would delay the next job by milliseconds); what runs now means nothing after one."""
        failures = 0
        while True:
            try:
                atomic_write_json(self._path(STATE_FILE), self.record, durable=False)
            except OSError as e:
                if failures == 0:
                    with contextlib.suppress(OSError):
                        print(f"gpupool runner: cannot write {STATE_FILE}: {e}", file=sys.stderr)
                if not (retry and e.errno in (errno.ENOSPC, errno.EDQUOT)):
                    return False
                time.sleep(RECORD_RETRY_SECONDS[min(failures, len(RECORD_RETRY_SECONDS) - 1)])
                failures += 1
                continue
            notify(self.notify_fifo)
            if retry:
                sync(self._path(STATE_FILE))
            return True


def pids_excess(cgroup: cgroups.Cgroup, limit: int | None) -> dict[str, object] | None:
    """The record of a job the kernel refused a fork at its task limit, or None."""
    if cgroup.pids_refused() == 0:
        return None
    shown = f"{limit:,}" if limit else "its"
    message = (
        f"reached its limit of {shown} tasks (processes and threads) and was stopped; "
        "an admin sets the limit for every job (GPUPOOL_JOB_PIDS_MAX)"
    )
    return {"reason": "PidsExceeded", "limit": limit, "message": message}


def _exec_failure(program: str, error: OSError) -> tuple[int, str]:
    """Exit code and log line for a workload that could not be executed."""
    if isinstance(error, FileNotFoundError):
        return CODE_NOT_FOUND, f"command not found: {program}"
    if isinstance(error, PermissionError):
        return CODE_NOT_EXECUTABLE, f"command is not executable: {program} (permission denied)"
    if error.errno == errno.ENOEXEC:
        return CODE_NOT_EXECUTABLE, f"command is not executable: {program} (exec format error)"
    return CODE_NOT_EXECUTABLE, f"cannot execute {program}: {error.strerror or error}"
