"""A workload's own network namespace, seen from its runner (stdlib only).

The sandbox (bwrap ``--unshare-net``) gives the workload a namespace holding only its own
loopback. Once bwrap reports the sandbox, and before the job runs, the runner

- starts ``pasta`` (Debian's ``passt``) on that namespace for egress: a user-space NAT, with
  no port forwarded either way (``-t/-u/-T/-U none``) and the gateway not mapped to the host
  (``--no-map-gw``), so the node's loopback and its listeners stay out of reach; without
  pasta, or where it fails (a node without a routable interface), the job runs without
  egress and its events say so;
- for a workload that serves, forks the bridge of ``gpupool.runner.bridge`` onto the
  attempt's socket.

Both end with the attempt: the runner stops them when the workload has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from gpupool.runner.wire import NetworkPolicy

LISTEN_SOCKET = "listen.sock"  # in the attempt directory
NO_EGRESS = "the job has no network egress"  # how its notes begin (the NoEgress event)
PASTA_PID_FILE = "pasta.pid"
PASTA_LOG_FILE = "pasta.log"  # in the attempt directory: what pasta said
EGRESS_SECONDS = 5.0  # how long pasta may take to configure the namespace
PASTA_OPTIONS = (
    "--config-net",
    "--quiet",
    "--tcp-ports",
    "none",
    "--udp-ports",
    "none",
    "--tcp-ns",
    "none",
    "--udp-ns",
    "none",
    "--no-map-gw",
)


class Network:
    """The egress daemon and the bridge of one attempt; ``attach`` once the sandbox exists."""

    def __init__(
        self,
        policy: NetworkPolicy,
        attempt_dir: str,
        user_namespace: bool,
        warm=None,  # noqa: ANN001 - a warmnet.Slot the sandbox was started in, egress ready
    ) -> None:
        self.policy = policy
        self.dir = attempt_dir
        self.user_namespace = user_namespace  # the sandbox made one (runner not root)
        self.warm = warm
        self.pasta: subprocess.Popen[bytes] | None = None
        self.pasta_started = 0.0
        self.bridge_pid: int | None = None
        self._bridge: tuple[int, object, object] | None = None  # listeners, until forked
        self.notes: list[str] = []

    def attach(self, init_pid: int) -> None:
        """Start egress on the namespace of the sandbox's init, and make the bridge's
        listeners. A root runner opens the API's port inside the namespace itself, so that
        a connection made as soon as the job runs waits in its backlog: the bridge is then
        forked at the first connection to a listener (``start_bridge``), off the start's
        path, and not at all for a job that neither serves nor calls the API. Without
        root (the namespace is in a user namespace the runner cannot leave again) the
        bridge is forked now and opens it."""
        if self.warm is not None:
            pass  # pasta configured the namespace before the job was asked for
        elif self.policy.egress is not None:
            self._start_egress(init_pid)
        else:
            self.notes.append(f"{NO_EGRESS}: pasta (Debian's passt) is absent")
        if self.policy.port is None and self.policy.api is None:
            return
        from gpupool.runner import bridge  # here: a plain job without API needs no bridge

        listener = api = None
        try:
            if self.policy.port is not None:
                listener = bridge.listen(os.path.join(self.dir, LISTEN_SOCKET))
            if self.policy.api is not None and not self.user_namespace:
                api = bridge.listen_inside(init_pid, self.policy.api[0])
        except BaseException:
            for sock in (listener, api):
                if sock is not None:
                    sock.close()
            raise
        self._bridge = (init_pid, listener, api)
        if self.user_namespace:
            self.start_bridge()

    def listeners(self) -> list[int]:
        """The descriptors of the listeners ``attach`` made that no bridge serves yet."""
        if self._bridge is None:
            return []
        return [sock.fileno() for sock in self._bridge[1:] if sock is not None]  # type: ignore[attr-defined]

    def start_bridge(self) -> bool:
        """Fork the bridge on the listeners ``attach`` made, if not forked yet; whether it
        was forked now."""
        if self._bridge is None:
            return False
        from gpupool.runner import bridge

        (init_pid, listener, api), self._bridge = self._bridge, None
        try:
            self.bridge_pid = bridge.start(
                init_pid, self.user_namespace, listener, self.policy.port, self.policy.api, api
            )
        finally:
            for sock in (listener, api):
                if sock is not None:
                    sock.close()
        return True

    def ready(self) -> None:
        """Wait until pasta has configured the namespace (it forks into the background
        then); a failure is noted, the job runs without egress."""
        if self.pasta is None:
            return
        left = max(0.0, EGRESS_SECONDS - (time.monotonic() - self.pasta_started))
        try:
            code = self.pasta.wait(left)
        except subprocess.TimeoutExpired:
            self.pasta.kill()
            self.pasta.wait()
            code = None
        self.pasta = None
        if code != 0:
            self.notes.append(
                f"{NO_EGRESS}: pasta could not configure its namespace"
                + ("" if code is None else f" (exit {code}; see {PASTA_LOG_FILE})")
            )

    def record(self) -> dict[str, object]:
        network = {"bridge_pid": self.bridge_pid, "mode": "isolated"}
        if self.warm is not None:
            network["warm"] = os.path.basename(self.warm.dir)
        return {"network": network}

    def close(self, reuse_for: str | None = None) -> None:
        """Stop the bridge and pasta (the namespace is gone or going with the workload).
        ``reuse_for``: the workload has ended, every process of it is gone, and this Unix
        account's next job may use a warm namespace again: it is given back if it holds
        nothing (``warmnet.Slot.give_back``), not discarded."""
        if self._bridge is not None:  # never forked: the workload did not get that far
            for sock in self._bridge[1:]:
                if sock is not None:
                    sock.close()  # type: ignore[attr-defined]
            self._bridge = None
        if self.pasta is not None:
            with contextlib.suppress(OSError):
                self.pasta.kill()
                self.pasta.wait()
            self.pasta = None
        if self.bridge_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.bridge_pid, signal.SIGKILL)
                os.waitpid(self.bridge_pid, 0)
            self.bridge_pid = None
        if self.warm is not None:
            warm, self.warm = self.warm, None
            if reuse_for is None or not warm.give_back(reuse_for):
                warm.discard()
        pid_file = os.path.join(self.dir, PASTA_PID_FILE)
        with contextlib.suppress(OSError, ValueError):
            with open(pid_file) as f:
                pid = int(f.read().strip())
            if is_pasta(pid):
                os.kill(pid, signal.SIGTERM)
            os.unlink(pid_file)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.dir, LISTEN_SOCKET))

    def _start_egress(self, init_pid: int) -> None:
        from gpupool.runner.bridge import open_namespaces

        assert self.policy.egress is not None
        # the namespaces opened here, by the runner, and passed: pasta opens no /proc/PID
        # path of a process it may not trace (the sandbox's init is not dumpable)
        fds = open_namespaces(init_pid, self.user_namespace)
        for fd in fds:
            os.set_inheritable(fd, True)
        argv = [self.policy.egress, *PASTA_OPTIONS]
        if self.user_namespace:  # the user namespace owning the network's (bwrap nests one)
            argv += ["--userns", f"/proc/self/fd/{fds[0]}"]
        else:
            # as root pasta would switch to nobody before it opens the namespace, which
            # nobody may not; it still drops every capability but the two it needs and
            # confines itself (seccomp, namespaces of its own) once attached
            argv += ["--runas", "0"]
        argv += ["--netns", f"/proc/self/fd/{fds[-1]}", "--pid", self._pid_file()]
        self.pasta_started = time.monotonic()
        try:
            with open(os.path.join(self.dir, PASTA_LOG_FILE), "ab") as log:
                self.pasta = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,  # why it failed, for the operator
                    close_fds=True,
                    pass_fds=tuple(fds),
                    env={},
                )
        except OSError as e:
            self.notes.append(f"{NO_EGRESS}: cannot run pasta: {e}")
        finally:
            for fd in fds:
                os.close(fd)

    def _pid_file(self) -> str:
        return os.path.join(self.dir, PASTA_PID_FILE)


def leftover_egress(jobs_dir: str) -> list[int]:
    """Pids of the pasta daemons of attempts under ``jobs_dir`` whose runner is gone: one
    killed with -9 could not stop its pasta, which holds the dead namespace. Read from
    /proc (a few hundred entries), not from every attempt directory."""
    prefix = os.path.join(os.path.realpath(jobs_dir), "")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not is_pasta(int(entry)):
            continue
        pid_file = pid_file_of(int(entry))
        if pid_file and pid_file.startswith(prefix) and not runner_alive(pid_file):
            found.append(int(entry))
    return found


def pid_file_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    if b"--pid" not in args or args.index(b"--pid") + 1 >= len(args):
        return None
    return os.path.realpath(args[args.index(b"--pid") + 1].decode(errors="replace"))


def runner_alive(pid_file: str) -> bool:
    """Whether the runner of the attempt that wrote ``pid_file`` still runs."""
    from gpupool.runner.layout import STATE_FILE, process_create_time, read_json

    state = read_json(os.path.join(os.path.dirname(pid_file), STATE_FILE)) or {}
    pid, created = state.get("runner_pid"), state.get("runner_create_time")
    if not isinstance(pid, int) or "exit_code" in state:
        return False
    now = process_create_time(pid)
    return now is not None and (created is None or abs(now - float(created)) < 1.0)


def is_pasta(pid: int) -> bool:
    """Whether ``pid`` is still a pasta process (the pid file may be stale)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip().startswith(("pasta", "passt"))
    except OSError:
        return False
