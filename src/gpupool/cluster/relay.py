"""The node agent's relay: how the server reaches a workload that serves on a joined node
(standard library only; both ends of the protocol live here).

On one machine the server connects to a serving workload's runner socket
(ATTEMPT_DIR/listen.sock, ``runner.bridge``). On a pool that socket is on another machine, so
each node agent serves a TCP listener on its node's address (the address the pool has for the
node) that takes a connection to the socket of one attempt on that node: the agent has the
runner's bridge hand over a connection to the workload (inside its own network namespace) and
copies bytes between the two. Nothing on the node's network reaches a workload but through
this listener, and only the server may use it:

- the agent makes a random secret when it first starts (kept, mode 0600, in its data
  directory, so that an agent that Ray restarts keeps it) and never sends it anywhere;
- for each attempt that serves it derives the attempt's key (``attempt_key``: HMAC of the
  secret over the job and attempt), which it gives the server over Ray, in its answer to a
  start or a recovery; the server keeps it with the attempt;
- a client proves per connection that it holds the key of the attempt it names, without
  sending it, for a nonce the agent chose (HMAC challenge-response, as the MPI agent does):
  a key opens one attempt, a proof seen on the wire cannot be played again.

Protocol (version 1), one attempt per TCP connection:

1. The agent sends one line of JSON: ``{"version": 1, "nonce": "<64 hex digits>"}\\n``.
2. The client answers one line (at most MAX_HEADER bytes, all of it within HEADER_SECONDS):
   ``{"version": 1, "job": <int>, "attempt": <int>, "proof": "<hex>"}\\n``, where ``proof``
   is HMAC-SHA256, keyed with the attempt's key, of ``PROOF_CONTEXT + nonce + "\\n" + "<job>
   <attempt>"``. The attempt is named by its numbers only; the agent maps them to the
   attempt's directory under its own jobs directory (no path ever comes from the client). A
   header late, malformed, of another version, naming anything but two positive integers,
   or with a wrong proof gets the connection closed without a word. At most
   MAX_UNAUTHENTICATED connections wait for their header at once: one more is closed at once.
3. The agent answers one byte: ``\\x00``, and from then on the connection is the workload's
   (bytes both ways, an end passed on as a half-close); or ``\\x01`` and an error number
   (ECONNREFUSED: the attempt does not serve, or not yet), then it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from gpupool.domain.endpoints import RelayTarget, number
from gpupool.runner import bridge
from gpupool.runner.network import LISTEN_SOCKET

log = logging.getLogger(__name__)

VERSION = 1
PROOF_CONTEXT = b"gpupool-relay 1\n"  # what a proof is for: no other use of the key
KEY_CONTEXT = b"gpupool-relay attempt key\n"
MAX_HEADER = 1024
HEADER_SECONDS = 5.0  # a client that has not sent its whole header by then is dropped
MAX_UNAUTHENTICATED = 32  # connections waiting for their header at once; more are closed
MAX_RELAYED = 4096  # connections relayed at once; more are closed
CONNECT_SECONDS = 10.0
ANSWER_OK = b"\x00"
ANSWER_FAILED = b"\x01"


class RelayError(OSError):
    """The agent's relay turned the connection away, or did not answer as it should."""


def attempt_key(secret: bytes, job_id: int, attempt: int) -> str:
    """The key of one attempt, derived from the agent's secret (which stays on its node)."""
    message = KEY_CONTEXT + f"{job_id} {attempt}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def proof(key: str, nonce: str, job_id: int, attempt: int) -> str:
    """What a client sends to show it holds ``key``, for ``nonce`` and this attempt only."""
    message = PROOF_CONTEXT + f"{nonce}\n{job_id} {attempt}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


# -- the client's side (the server) ----------------------------------------------------------


def connect(target: RelayTarget, timeout: float = CONNECT_SECONDS) -> socket.socket:
    """A socket connected, through its node's agent, to the workload of ``target``.
    ConnectionRefusedError when the workload does not serve (yet); RelayError when the agent
    turned the connection away (a key it does not know)."""
    sock = socket.create_connection((target.host, target.port), timeout)
    try:
        _no_delay(sock)
        sock.sendall(header(target, _line(sock)))
        first = sock.recv(1)
        _check(target, first, sock.recv(1) if first == ANSWER_FAILED else b"")
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


async def connect_async(target: RelayTarget) -> socket.socket:
    """``connect`` on the running event loop (a non-blocking socket); the caller bounds it
    with a timeout of its own."""
    loop = asyncio.get_running_loop()
    info = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        _no_delay(sock)
        await loop.sock_connect(sock, address)
        challenge = bytearray()
        while b"\n" not in challenge and len(challenge) <= MAX_HEADER:
            chunk = await loop.sock_recv(sock, MAX_HEADER)
            if not chunk:
                break
            challenge += chunk
        await loop.sock_sendall(sock, header(target, bytes(challenge)))
        first = await loop.sock_recv(sock, 1)
        _check(target, first, await loop.sock_recv(sock, 1) if first == ANSWER_FAILED else b"")
    except BaseException:
        sock.close()
        raise
    return sock


def header(target: RelayTarget, challenge: bytes) -> bytes:
    """The client's header for the agent's ``challenge`` line."""
    line, _, _ = challenge.partition(b"\n")
    try:
        sent = json.loads(line or b"null")
    except ValueError:
        sent = None
    nonce = sent.get("nonce") if isinstance(sent, dict) else None
    if not isinstance(sent, dict) or sent.get("version") != VERSION or not isinstance(nonce, str):
        raise RelayError(
            errno.EPROTO, f"the relay at {target.host}:{target.port} sent no challenge"
        )
    message = {
        "version": VERSION,
        "job": target.job_id,
        "attempt": target.attempt,
        "proof": proof(target.key, nonce, target.job_id, target.attempt),
    }
    return json.dumps(message).encode() + b"\n"


def _check(target: RelayTarget, first: bytes, code: bytes) -> None:
    """The agent's answer (its first byte, and the error number after a no): nothing more
    to do when it said yes."""
    if first == ANSWER_OK:
        return
    where = f"job {target.job_id} attempt {target.attempt} at {target.host}:{target.port}"
    if not first:
        raise RelayError(errno.EACCES, f"the relay turned away the connection to {where}")
    number = code[0] if code else errno.ECONNREFUSED
    if number == errno.ECONNREFUSED:
        raise ConnectionRefusedError(number, f"the workload of {where} does not serve (yet)")
    raise RelayError(number, f"the relay could not reach {where}: {os.strerror(number)}")


def _line(sock: socket.socket) -> bytes:
    """The agent's challenge line (it sends nothing after it until the client speaks)."""
    data = bytearray()
    while b"\n" not in data and len(data) <= MAX_HEADER:
        chunk = sock.recv(MAX_HEADER)
        if not chunk:
            break
        data += chunk
    return bytes(data)


# -- the agent's side ---------------------------------------------------------------------------


class Relay:
    """The agent's listener: serves each connection in a thread of its own, until closed.
    ``jobs_dir``: where the node's attempts are (the only directory a connection reaches)."""

    def __init__(
        self,
        listener: socket.socket,
        secret: bytes,
        jobs_dir: Path,
        header_seconds: float = HEADER_SECONDS,
    ) -> None:
        self.listener, self.secret, self.jobs_dir = listener, secret, Path(jobs_dir)
        self.header_seconds = header_seconds
        # connections that have not proven a key yet: capped, so that whoever can connect
        # to the node cannot hold every thread and descriptor of the agent
        self.unauthenticated = threading.BoundedSemaphore(MAX_UNAUTHENTICATED)
        self.relayed = threading.BoundedSemaphore(MAX_RELAYED)
        self.thread = threading.Thread(target=self._accept, name="relay", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.listener.getsockname()[:2]
        return host, port

    def target(self, job_id: int, attempt: int) -> RelayTarget:
        """What the server needs to reach this attempt through this relay."""
        host, port = self.address
        return RelayTarget(host, port, attempt_key(self.secret, job_id, attempt), job_id, attempt)

    def start(self) -> Relay:
        self.thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError as e:
                if self.listener.fileno() < 0 or e.errno in (errno.EBADF, errno.EINVAL):
                    return  # closed
                log.warning("the relay cannot accept a connection: %s", e)
                time.sleep(0.1)
                continue
            if not self.unauthenticated.acquire(blocking=False):
                conn.close()  # too many waiting for their header: this one is not served
                continue
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                named = read_request(conn, self.secret, self.header_seconds)
            finally:
                self.unauthenticated.release()
            if named is None:
                return
            if not self.relayed.acquire(blocking=False):
                return
            try:
                self._relay(conn, *named)
            finally:
                self.relayed.release()

    def _relay(self, conn: socket.socket, job_id: int, attempt: int, early: bytes) -> None:
        """Hand the connection to the attempt's workload (through its runner's bridge)."""
        path = self.jobs_dir / str(job_id) / "attempts" / str(attempt) / LISTEN_SOCKET
        try:
            upstream = bridge.handoff(str(path), CONNECT_SECONDS)
        except OSError as e:
            code = e.errno if isinstance(e.errno, int) and 0 < e.errno < 256 else 0
            if isinstance(e, FileNotFoundError | ConnectionRefusedError) or not code:
                code = errno.ECONNREFUSED
            with contextlib.suppress(OSError):
                conn.sendall(ANSWER_FAILED + bytes([code]))
            return
        with upstream, contextlib.suppress(OSError):
            conn.sendall(ANSWER_OK)
            if early:  # what the client sent right after its header
                upstream.sendall(early)
            pipe(conn, upstream)


def read_request(
    conn: socket.socket, secret: bytes, header_seconds: float = HEADER_SECONDS
) -> tuple[int, int, bytes] | None:
    """Challenge the client; (job, attempt, the bytes it sent after its header) for a
    well-formed header, sent whole within ``header_seconds``, that proves the attempt's key;
    None for anything else."""
    deadline = time.monotonic() + header_seconds
    nonce = os.urandom(32).hex()
    try:
        conn.settimeout(header_seconds)
        conn.sendall(json.dumps({"version": VERSION, "nonce": nonce}).encode() + b"\n")
        line, early = _read_header(conn, deadline)
        sent = json.loads(line) if line is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(sent, dict) or sent.get("version") != VERSION:
        return None
    job_id, attempt, given = sent.get("job"), sent.get("attempt"), sent.get("proof")
    if not (number(job_id) and number(attempt) and isinstance(given, str)):
        return None
    expected = proof(attempt_key(secret, job_id, attempt), nonce, job_id, attempt)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return None
    conn.settimeout(None)
    return job_id, attempt, early


def _read_header(conn: socket.socket, deadline: float) -> tuple[bytes | None, bytes]:
    """One line received by ``deadline`` and what came after it: a peer that trickles
    bytes gets no more time than one that sends nothing. None when late, long or cut."""
    data = bytearray()
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > MAX_HEADER:
            return None, b""
        conn.settimeout(left)
        try:
            chunk = conn.recv(MAX_HEADER + 1 - len(data))
        except TimeoutError:
            return None, b""
        if not chunk:
            return None, b""
        data += chunk
    line, _, early = bytes(data).partition(b"\n")
    return line, early


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways (the runner bridge's relay), small writes sent at once."""
    for sock in (a, b):
        _no_delay(sock)
    bridge.relay(a, b)


def listen(host: str, port: int = 0) -> socket.socket:
    """The relay's listening socket on ``host`` (``port`` 0: any free one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=128)


def open_kept(record: Path, jobs_dir: Path, host: str | None) -> Relay | None:
    """The node's relay, started: with the secret, address and port recorded at ``record``
    (an agent that Ray restarted keeps them, so the keys the server holds still open its
    attempts), else on ``host`` with a new secret, recorded (mode 0600). None when nothing
    is recorded and no ``host`` is given."""
    kept = _read_record(record)
    secret = bytes.fromhex(kept["secret"]) if kept else os.urandom(32)
    host = kept["host"] if kept else host
    if host is None:
        return None
    port = kept["port"] if kept else 0
    try:
        listener = listen(host, port)
    except OSError as e:
        if not port:
            raise
        # its port taken meanwhile: the attempts recorded with it cannot be reached now
        log.warning("the relay cannot listen on %s:%d again (%s): on a new port", host, port, e)
        listener = listen(host)
    relay = Relay(listener, secret, jobs_dir)
    _write_record(record, {"secret": secret.hex(), "host": host, "port": relay.address[1]})
    return relay.start()


def _read_record(record: Path) -> dict[str, Any] | None:
    try:
        kept = json.loads(record.read_text())
        bytes.fromhex(kept["secret"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(kept.get("host"), str) or not number(kept.get("port")):
        return None
    return kept


def _write_record(record: Path, kept: dict[str, Any]) -> None:
    record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = record.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(kept, file)
    os.replace(tmp, record)


# -- the platform's API for the node's jobs -----------------------------------------------------


class ApiForward:
    """The platform's API for the jobs of a pool's node: a Unix socket of the node (mode
    0600, in the agent's data directory) that forwards each connection to the server's
    ``address``. A job with a network of its own finds the API on its own loopback, which
    its runner's bridge relays to this socket (``sandbox.network.api``), as to the server's
    own DATA_DIR/api.sock on one machine."""

    def __init__(self, path: Path, address: tuple[str, int]) -> None:
        self.path, self.address = path, address
        self.listener = bridge.listen(str(path))
        self.slots = threading.BoundedSemaphore(MAX_RELAYED)
        threading.Thread(target=self._accept, name="api-forward", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                if self.listener.fileno() < 0:
                    return  # closed
                time.sleep(0.1)
                continue
            if not self.slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    def _forward(self, conn: socket.socket) -> None:
        try:
            with conn, socket.create_connection(self.address, CONNECT_SECONDS) as server:
                pipe(conn, server)
        except OSError:
            pass
        finally:
            self.slots.release()


def open_api_forward(
    record: Path, path: Path, address: tuple[str, int] | None
) -> ApiForward | None:
    """The node's API forward to the server at ``address`` (None: the one recorded at
    ``record`` by an agent before this one, if any), recorded for the next."""
    if address is None:
        kept = _read_json(record)
        host, port = kept.get("host"), kept.get("port")
        if not isinstance(host, str) or not number(port):
            return None
        address = (host, port)
    forward = ApiForward(path, address)
    _write_record(record, {"host": address[0], "port": address[1]})
    return forward


def _read_json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _no_delay(sock: socket.socket) -> None:
    """Small writes go out at once: a relay that copies an HTTP request's head and body as
    they come would otherwise wait on delayed ACKs (~40 ms a request)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
