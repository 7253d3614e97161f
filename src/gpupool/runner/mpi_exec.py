"""Open MPI's rsh agent for gpupool's MPI jobs, and the service the other tasks run for it.

An MPI job's task 0 runs ``mpirun``, which starts its daemon (``orted``) on every task's
node through ``plm_rsh_agent``, as it would through ssh. gpupool's tasks have no ssh between
them; instead each other task runs this module's service in its own sandbox, under the job's
account, and task 0's mpirun uses this module as its agent::

    python -m gpupool.runner.mpi_exec serve              (tasks 1.., instead of idling)
    python -m gpupool.runner.mpi_exec rsh ALIAS WORDS... (mpirun's plm_rsh_agent)

``rsh`` behaves as ssh does for mpirun: it joins WORDS with spaces and has ``sh -c`` run
them on the task that ALIAS (``gpupool-task-<i>``, a hostfile name) names, in that task's
sandbox, working directory and environment; it relays the command's stdout and stderr and
exits with its exit status (255 when the task cannot be reached, like ssh). mpirun names
task 0's own alias too, and a daemon may start others (tree spawn): the agent's own task
runs the command here, without the network. A connection that fails is retried for
CONNECT_SECONDS: the other task may still be starting.

The environment, set by the launch plan (``gpupool.domain.launchers``):

* ``GPUPOOL_MPI_SECRET``: the attempt's secret, the same on all its tasks;
* ``GPUPOOL_MPI_HOSTS``: JSON ``{alias: "host:port"}`` of the tasks that serve;
* ``GPUPOOL_MPI_LISTEN``: ``host:port`` this task serves on (``[v6]:port`` for IPv6);
* ``GPUPOOL_TASK_INDEX``: this task's index;
* ``GPUPOOL_MPI_HEADER_SECONDS``: optional, HEADER_SECONDS for ``serve``.

Protocol (version 2), one command per TCP connection. The secret never travels: the client
proves it knows it, for a nonce the server chose, so that a header seen on the wire cannot be
played again nor its command changed.

1. The server sends one line of JSON, its challenge:
   ``{"version": 2, "nonce": "<64 hex digits, new for each connection>"}\\n``.
2. The client answers one line of JSON (at most MAX_HEADER bytes; the server waits
   HEADER_SECONDS in all for it):
   ``{"version": 2, "proof": "<hex>", "command": "<shell command>"}\\n``, where ``proof``
   is HMAC-SHA256, keyed with GPUPOOL_MPI_SECRET, of ``PROOF_CONTEXT + nonce + "\\n" +
   command`` (see ``proof``). A header that is late, malformed, of another version or with
   another proof (compared with ``hmac.compare_digest``) gets the connection closed without
   a word. At most MAX_UNAUTHENTICATED connections wait for their header at once: one more
   is closed at once.
3. The server runs ``sh -c COMMAND`` (stdin ``/dev/null``, in a process group of its own)
   and sends frames: one byte of kind, four of payload length (big-endian), the payload.
   Kind ``1``: stdout bytes; ``2``: stderr bytes; ``x``: the exit status in ASCII decimal
   (128 + N after signal N), sent once both streams ended and the command exited, then the
   server closes the connection.
4. The client sends nothing more and keeps its side open: closing it (the agent was killed)
   hangs the command up, whose process group then gets SIGTERM, as sshd would send SIGHUP.

``serve`` answers any number of connections at once until SIGTERM (or SIGINT, SIGHUP):
then every running command's process group gets SIGTERM, and SIGKILL after STOP_SECONDS;
it exits 0, as being stopped is how a serving task ends. Standard library only: it runs in
the sandbox.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import BinaryIO

ALIAS_PREFIX = "gpupool-task-"  # as domain.launchers.MPI_ALIAS_PREFIX (a test holds them equal)
VERSION = 2
PROOF_CONTEXT = b"gpupool-mpi-exec 2\n"  # what a proof is for: no other use of the secret
MAX_HEADER = 1 << 20
HEADER_SECONDS = 10.0  # a client that has not sent its whole header by then is dropped
MAX_UNAUTHENTICATED = 16  # connections waiting for their header at once; more are closed
CONNECT_SECONDS = 30.0  # how long rsh retries a task that does not answer yet
CONNECT_RETRY_SECONDS = 0.2
STOP_SECONDS = 5.0  # after SIGTERM: how long running commands have before SIGKILL
EXIT_POLL_SECONDS = 0.5  # a command that closed its streams: how often to look for its exit
READ_CHUNK = 1 << 16
STDOUT, STDERR, EXIT = b"1", b"2", b"x"
FRAME = struct.Struct(">cI")
EXIT_UNREACHABLE = 255  # ssh's exit status when it cannot run the command
EXIT_USAGE = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class MpiExecError(Exception):
    """The environment or the peer does not allow the command to run."""


def main(argv: list[str]) -> int:
    """``serve`` or ``rsh ALIAS WORDS...``; the exit status."""
    if argv[:1] == ["serve"] and len(argv) == 1:
        return serve(os.environ)
    if argv[:1] == ["rsh"] and len(argv) >= 3:
        return rsh(argv[1], argv[2:], os.environ)
    _say("usage: python -m gpupool.runner.mpi_exec serve | rsh ALIAS WORDS...")
    return EXIT_USAGE


# -- rsh -------------------------------------------------------------------------------------


def rsh(alias: str, words: list[str], env: Mapping[str, str]) -> int:
    """Run ``words`` on the task ``alias`` names, as ssh would; its exit status, or 255."""
    command = " ".join(words)
    if alias == ALIAS_PREFIX + env.get("GPUPOOL_TASK_INDEX", ""):
        return _run_here(command)
    try:
        address = _address_of(alias, env)
        secret = _secret(env)
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            with connect(address, deadline) as conn:
                nonce = challenged(conn, deadline)
                if nonce is None:  # turned away (too many waiting): try again
                    time.sleep(CONNECT_RETRY_SECONDS)
                    continue
                header = {"version": VERSION, "proof": proof(secret, nonce, command)}
                conn.sendall(json.dumps(header | {"command": command}).encode() + b"\n")
                return relay(conn)
    except (MpiExecError, OSError) as e:
        _say(f"gpupool mpi rsh {alias}: {e}")
        return EXIT_UNREACHABLE


def connect(address: tuple[str, int], deadline: float) -> socket.socket:
    """A connection to ``address``, retried until ``deadline`` (time.monotonic())."""
    while True:
        try:
            return socket.create_connection(address, timeout=CONNECT_RETRY_SECONDS * 10)
        except OSError as e:
            if time.monotonic() >= deadline:
                raise MpiExecError(f"cannot connect to {address[0]}:{address[1]}: {e}") from e
            time.sleep(CONNECT_RETRY_SECONDS)


def proof(secret: str, nonce: str, command: str) -> str:
    """What shows that the sender of ``command`` knows ``secret``, for this ``nonce`` only."""
    message = PROOF_CONTEXT + nonce.encode() + b"\n" + command.encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def read_challenge(conn: socket.socket) -> str:
    """The server's nonce (MpiExecError when it sends none, or another protocol's line)."""
    conn.settimeout(HEADER_SECONDS)
    line = _read_line(conn, time.monotonic() + HEADER_SECONDS)
    try:
        challenge = json.loads(line or b"null")
    except ValueError:
        challenge = None
    if not isinstance(challenge, dict) or challenge.get("version") != VERSION:
        raise MpiExecError(
            f"the task did not send a version-{VERSION} challenge (busy with other "
            "connections, or another version of gpupool)"
        )
    nonce = challenge.get("nonce")
    if not isinstance(nonce, str) or not nonce:
        raise MpiExecError("the task sent a challenge without a nonce")
    return nonce


def challenged(conn: socket.socket, deadline: float) -> str | None:
    """The task's nonce; None when it closed the connection without one before ``deadline``
    (it serves MAX_UNAUTHENTICATED connections waiting at once), MpiExecError after it."""
    try:
        return read_challenge(conn)
    except (MpiExecError, OSError):
        if time.monotonic() >= deadline:
            raise
        return None


def relay(conn: socket.socket) -> int:
    """Copy the server's output frames to stdout and stderr; return the exit status frame's."""
    conn.settimeout(None)  # a command may run for as long as the job does
    with conn.makefile("rb") as reader:
        while True:
            kind, payload = _read_frame(reader)
            if kind == EXIT:
                return int(payload)
            _write_all(1 if kind == STDOUT else 2, payload)


def _read_frame(reader: BinaryIO) -> tuple[bytes, bytes]:
    head = reader.read(FRAME.size)
    if len(head) < FRAME.size:
        raise MpiExecError(
            "the task closed the connection without an exit status "
            "(the job's secret did not match, or the task was stopped)"
        )
    kind, length = FRAME.unpack(head)
    payload = reader.read(length)
    if len(payload) < length or (kind == EXIT and not payload.isdigit()):
        raise MpiExecError("the task sent a broken frame")
    return kind, payload


def _run_here(command: str) -> int:
    """This task's own alias: become ``sh -c command``, as ssh to this host would run it."""
    try:
        os.execvp("sh", ["sh", "-c", command])
    except OSError as e:
        _say(f"gpupool mpi rsh: cannot run sh: {e}")
        return EXIT_UNREACHABLE


def _address_of(alias: str, env: Mapping[str, str]) -> tuple[str, int]:
    try:
        hosts = json.loads(env.get("GPUPOOL_MPI_HOSTS", ""))
    except ValueError as e:
        raise MpiExecError("GPUPOOL_MPI_HOSTS is not JSON {alias: host:port}") from e
    if not isinstance(hosts, dict) or not isinstance(hosts.get(alias), str):
        known = ", ".join(sorted(hosts)) if isinstance(hosts, dict) else "none"
        raise MpiExecError(f"unknown host {alias!r}: this job's tasks are {known}")
    return parse_address(hosts[alias])


def _secret(env: Mapping[str, str]) -> str:
    secret = env.get("GPUPOOL_MPI_SECRET", "")
    if not secret:
        raise MpiExecError("GPUPOOL_MPI_SECRET is not set")
    return secret


# -- serve -----------------------------------------------------------------------------------


def serve(env: Mapping[str, str]) -> int:
    """Listen on GPUPOOL_MPI_LISTEN and run authenticated commands until stopped."""
    try:
        address, secret = parse_address(env.get("GPUPOOL_MPI_LISTEN", "")), _secret(env)
        listener = socket.create_server(address, family=_family(address[0]), reuse_port=False)
        header_seconds = float(env.get("GPUPOOL_MPI_HEADER_SECONDS", HEADER_SECONDS))
    except (MpiExecError, OSError, ValueError) as e:
        _say(f"gpupool mpi serve: cannot listen: {e}")
        return 1
    with listener:
        return Server(listener, secret, header_seconds).run()


class Server:
    """Accepts connections on ``listener``; each runs one command in a thread of its own."""

    def __init__(
        self, listener: socket.socket, secret: str, header_seconds: float = HEADER_SECONDS
    ) -> None:
        self.listener, self.secret, self.header_seconds = listener, secret, header_seconds
        self.lock = threading.Lock()
        # connections that have not proven the secret yet: capped, so that nobody who can
        # connect holds every thread and descriptor of the task
        self.unauthenticated = threading.BoundedSemaphore(MAX_UNAUTHENTICATED)
        self.children: set[subprocess.Popen[bytes]] = set()
        self.threads: list[threading.Thread] = []
        self.stopping = False
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)

    def run(self) -> int:
        """Serve until a stop signal; then end the running commands. Returns 0."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self.stopping:
                for key, _ in selector.select():
                    if key.fileobj is self.listener:
                        self._accept()
        self._end_children()
        return 0

    def _on_stop(self, signum: int, frame: object) -> None:
        # no lock: the handler runs in the main thread, which may hold it. A command that
        # starts after this still gets its stop: _start checks the flag under the lock, and
        # _end_children signals under it.
        self.stopping = True

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError as e:  # out of descriptors, a peer gone already: serve the next
            _say(f"gpupool mpi serve: cannot accept a connection: {e}")
            return
        if not self.unauthenticated.acquire(blocking=False):
            conn.close()  # too many waiting for their header: this one is not served
            return
        self.threads = [t for t in self.threads if t.is_alive()]
        thread = threading.Thread(target=self._serve_one, args=(conn,), daemon=True)
        self.threads.append(thread)
        thread.start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                command = read_command(conn, self.secret, self.header_seconds)
            finally:
                self.unauthenticated.release()
            if command is None:
                return
            try:
                child = self._start(command)
            except OSError as e:
                with contextlib.suppress(OSError):
                    conn.sendall(_frame(STDERR, f"gpupool mpi serve: cannot run sh: {e}\n"))
                    conn.sendall(_frame(EXIT, "127"))
                return
            if child is not None:
                Session(conn, child).relay()
                with self.lock:
                    self.children.discard(child)

    def _start(self, command: str) -> subprocess.Popen[bytes] | None:
        """``sh -c command`` in a group of its own, unless the server is stopping."""
        with self.lock:
            if self.stopping:
                return None
            child = subprocess.Popen(
                ["sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # so that a stop reaches the daemon and its ranks
            )
            self.children.add(child)
            return child

    def _end_children(self) -> None:
        """SIGTERM each command's group (once: the runner's group signal did not reach
        them), SIGKILL after STOP_SECONDS; let their sessions send the exit statuses."""
        self.listener.close()
        self._signal_children(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._signal_children(signal.SIGKILL)
        for thread in self.threads:
            thread.join(1.0)

    def _signal_children(self, sig: int) -> None:
        with self.lock:
            for child in self.children:
                _signal_group(child, sig)


def read_command(
    conn: socket.socket, secret: str, header_seconds: float = HEADER_SECONDS
) -> str | None:
    """Challenge the client with a new nonce; the command of a well-formed header, sent
    whole within ``header_seconds``, whose proof shows ``secret``; None for anything else."""
    deadline = time.monotonic() + header_seconds
    nonce = os.urandom(32).hex()
    try:
        conn.settimeout(header_seconds)
        conn.sendall(json.dumps({"version": VERSION, "nonce": nonce}).encode() + b"\n")
        header = json.loads(_read_line(conn, deadline) or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("version") != VERSION:
        return None
    given, command = header.get("proof"), header.get("command")
    if not isinstance(given, str) or not isinstance(command, str):
        return None
    if not hmac.compare_digest(given.encode(), proof(secret, nonce, command).encode()):
        return None
    conn.settimeout(None)
    return command


def _read_line(conn: socket.socket, deadline: float, limit: int = MAX_HEADER) -> bytes | None:
    """One line (without its end) received by ``deadline``: a peer that trickles bytes gets
    no more time than one that sends nothing. None when late, too long, or cut short."""
    data = bytearray()
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > limit:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(min(READ_CHUNK, limit + 1 - len(data)))
        except TimeoutError:
            return None
        if not chunk:
            return None
        data += chunk
    line, _, _ = bytes(data).partition(b"\n")
    return line


class Session:
    """One command's output sent as frames until it ended; its exit status last. A client
    that hangs up gets its command's group SIGTERM (its output is then read and dropped)."""

    def __init__(self, conn: socket.socket, child: subprocess.Popen[bytes]) -> None:
        self.conn, self.child = conn, child
        self.connected = True

    def relay(self) -> None:
        """Until both streams ended and the command exited (a command may close its streams
        and go on: the client's hang-up is still watched meanwhile)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.child.stdout, selectors.EVENT_READ, STDOUT)
            selector.register(self.child.stderr, selectors.EVENT_READ, STDERR)
            selector.register(self.conn, selectors.EVENT_READ, None)
            while (streaming := _streaming(selector)) or self.child.poll() is None:
                for key, _ in selector.select(None if streaming else EXIT_POLL_SECONDS):
                    self._pump(selector, key)
        code = self.child.wait()
        self._send(EXIT, str(128 - code if code < 0 else code).encode())

    def _pump(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        if key.data is None:  # the client: it sends nothing more, so this is its hang-up
            if not _recv(self.conn):
                selector.unregister(self.conn)
                self.connected = False
                _signal_group(self.child, signal.SIGTERM)
            return
        data = os.read(key.fd, READ_CHUNK)
        if not data:
            selector.unregister(key.fileobj)
            return
        self._send(key.data, data)

    def _send(self, kind: bytes, payload: bytes) -> None:
        if not self.connected:
            return
        try:
            self.conn.sendall(FRAME.pack(kind, len(payload)) + payload)
        except OSError:
            self.connected = False
            _signal_group(self.child, signal.SIGTERM)


# -- helpers ---------------------------------------------------------------------------------


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (host, port); MpiExecError when malformed."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MpiExecError(f"{text!r} is not host:port")
    return host, int(port)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _frame(kind: bytes, text: str) -> bytes:
    payload = text.encode()
    return FRAME.pack(kind, len(payload)) + payload


def _streaming(selector: selectors.BaseSelector) -> bool:
    """Whether the command's stdout or stderr is still open."""
    return any(key.data is not None for key in selector.get_map().values())


def _recv(conn: socket.socket) -> bytes:
    """What the client sent (ignored), or b"" once it closed or reset the connection."""
    try:
        return conn.recv(READ_CHUNK)
    except OSError:
        return b""


def _signal_group(child: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has ended
        os.killpg(child.pid, sig)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
