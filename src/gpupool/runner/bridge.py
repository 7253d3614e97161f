"""The runner's socket: how the platform reaches a workload that serves from a network
namespace of its own (stdlib only; both ends of the protocol live here).

A workload with ``network: isolated`` sees only its own loopback (and egress through a
user-space NAT): nothing on the node can connect to the port it listens on, and it cannot
squat a port of the node. The platform reaches it through a Unix socket in the attempt's
record directory (ATTEMPT_DIR/listen.sock, mode 0600, so only the runner's account, the
server's, may connect), served by a small bridge process that the runner forks and moves into
the workload's network namespace. Per connection the client either

- speaks at once (HTTP, a WebSocket handshake): the bridge connects to the workload's port
  inside the namespace and relays bytes both ways (any Unix-socket HTTP client works), or
- sends one NUL byte first (``handoff``): the bridge connects to the workload's port and
  passes that connected TCP socket back over SCM_RIGHTS, so the client then talks to the
  workload directly, with no relay in the path (the proxy's /serve keeps such connections
  alive); a refused connection is answered with one byte and the error number.

Socket paths over the kernel's 108 bytes are reached through ``/proc/self/fd/N/name``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import socket
import threading
import time

HANDOFF = b"\x00"
ANSWER_OK = b"\x00"
ANSWER_FAILED = b"\x01"
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
MAX_SUN_PATH = 100  # sockaddr_un holds 108 bytes; keep clear of the edge
RELAY_CHUNK = 256 * 1024
LOOPBACK_WAIT_SECONDS = 2.0  # how long a bind on the job's loopback is tried again
CONNECT_SECONDS = 5.0  # the bridge's connect inside the namespace (it is local)
MAX_CONNECTIONS = 1024  # relayed at once; more wait in the listen backlog


class BridgeError(OSError):
    """The runner's socket could not be reached, or the workload refused the connection."""


# -- the client's side (the server, a node agent) -------------------------------------------


def connect(path: str, timeout: float = 10.0) -> socket.socket:
    """A Unix socket connected to the runner's bridge, for a client that speaks first
    (relay mode). Raises ConnectionRefusedError / FileNotFoundError as a connect would."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        with unix_address(path) as address:
            sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def handoff(path: str, timeout: float = 10.0) -> socket.socket:
    """A TCP socket connected to the workload's port inside its namespace, passed by the
    bridge (no relay). ConnectionRefusedError when the workload does not listen (yet)."""
    with connect(path, timeout) as sock:
        sock.sendall(HANDOFF)
        message, fds, _, _ = socket.recv_fds(sock, 64, 1)
    return received(message, fds, path)


def received(message: bytes, fds: list[int], path: str) -> socket.socket:
    """The bridge's answer to a handoff: the connected socket, or the error it names."""
    if message[:1] == ANSWER_OK and fds:
        for extra in fds[1:]:
            os.close(extra)
        tcp = socket.socket(fileno=fds[0])
        tcp.settimeout(None)
        return tcp
    for fd in fds:
        os.close(fd)
    if not message:
        raise BridgeError(errno.ECONNRESET, f"the runner's bridge at {path} closed at once")
    code = message[1] if len(message) > 1 else errno.ECONNREFUSED
    raise _os_error(code, f"the workload behind {path} did not take the connection")


@contextlib.contextmanager
def unix_address(path: str):  # noqa: ANN201 - a context manager of the address to use
    """``path`` itself, or ``/proc/self/fd/N/name`` through its directory when too long."""
    if len(path.encode()) <= MAX_SUN_PATH:
        yield path
        return
    directory, name = os.path.split(path)
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def _os_error(code: int, message: str) -> OSError:
    if code == errno.ECONNREFUSED:
        return ConnectionRefusedError(code, message)
    return BridgeError(code, f"{message}: {os.strerror(code)}")


# -- the runner's side --------------------------------------------------------------------------


def listen(path: str) -> socket.socket:
    """The bridge's listening socket at ``path`` (a stale one replaced), mode 0600."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            with unix_address(path) as address:
                sock.bind(address)
        finally:
            os.umask(old)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def start(
    init_pid: int,
    user_namespace: bool,
    listener: socket.socket | None,
    port: int | None,
    api: tuple[int, str] | None = None,
    api_listener: socket.socket | None = None,
) -> int:
    """Fork the bridge: it enters the network namespace of ``init_pid`` (first its user
    namespace, when the sandbox made one) and, until it is killed or the runner dies, serves
    ``listener`` (connections to the workload's ``port``) and, with ``api`` = (port, Unix
    socket), the platform's API on the workload's own loopback at that port, relayed to the
    server's Unix socket (reached by its path, which no network namespace hides). Returns
    its pid; the listener stays the bridge's alone. ``api_listener``: the API's port,
    already listening inside the namespace (``listen_inside``), else the bridge opens it."""
    namespaces = open_namespaces(init_pid, user_namespace)
    runner = os.getpid()
    try:
        pid = os.fork()
    except BaseException:
        for fd in namespaces:
            os.close(fd)
        raise
    if pid:
        for fd in namespaces:
            os.close(fd)
        for sock in (listener, api_listener):
            if sock is not None:
                sock.close()
        return pid
    code = 1
    try:
        kept = [sock.fileno() for sock in (listener, api_listener) if sock is not None]
        _close_all_but({*kept, *namespaces})
        _become_bridge(runner, namespaces)
        slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        if api is not None:
            inside = api_listener or socket.create_server(("127.0.0.1", api[0]), backlog=128)
            threading.Thread(target=_serve_api, args=(inside, api[1], slots), daemon=True).start()
        if listener is not None and port is not None:
            serve(listener, port, slots)
        else:
            while True:
                signal.pause()
        code = 0
    except BaseException:  # noqa: BLE001 - the child never returns into the runner's code
        pass
    finally:
        os._exit(code)


def serve(listener: socket.socket, port: int, slots: threading.BoundedSemaphore) -> None:
    """Accept forever; each connection is relayed or handed off in a thread of its own."""
    while True:
        client, _ = listener.accept()
        slots.acquire()
        threading.Thread(target=_serve_one, args=(client, port, slots), daemon=True).start()


def _listen_on_loopback(port: int) -> socket.socket:
    """127.0.0.1:``port`` of the namespace this thread is in. A bind there failed once with
    EADDRNOTAVAIL in a CI run under load (the job's namespace not yet, or no longer, able to
    take the address; the cause was not found), failing the job's start: that error is tried
    again for a moment before it counts."""
    deadline = time.monotonic() + LOOPBACK_WAIT_SECONDS
    while True:
        try:
            return socket.create_server(("127.0.0.1", port), backlog=128)
        except OSError as e:
            if e.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
        time.sleep(0.005)


def listen_inside(init_pid: int, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` of the network namespace of ``init_pid``,
    made by entering it and coming back (root only: that namespace is the caller's to
    enter); connections made before anyone accepts wait in its backlog."""
    import ctypes  # here only: the runner's own start does not pay for it

    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the workload's namespace failed")
        try:
            return _listen_on_loopback(port)
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                os._exit(1)  # the runner must not go on inside the job's namespace
    finally:
        os.close(own)
        os.close(target)


def open_namespaces(init_pid: int, user_namespace: bool) -> list[int]:
    """Descriptors of the namespaces to enter, in order: the user namespace that owns the
    sandbox's network namespace (not the sandbox's own, which bwrap nests below it), then
    the network namespace."""
    net = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    if not user_namespace:
        return [net]
    try:
        owner = fcntl.ioctl(net, NS_GET_USERNS)
    except BaseException:
        os.close(net)
        raise
    os.set_inheritable(owner, False)
    return [owner, net]


def _close_all_but(keep: set[int]) -> None:
    """The runner's other descriptors (its pipes to the workload and bwrap) are not the
    bridge's: close them, so that none is held open by the bridge."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _become_bridge(runner: int, namespaces: list[int]) -> None:
    """In the forked child: default signals, die with the runner, enter the namespaces."""
    import ctypes  # here only: the runner's own start does not pay for it

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != runner:  # the runner died before the line above took effect
        os._exit(1)
    kinds = [CLONE_NEWUSER, CLONE_NEWNET] if len(namespaces) == 2 else [CLONE_NEWNET]
    for fd, kind in zip(namespaces, kinds, strict=True):
        if libc.setns(fd, kind) != 0:
            raise OSError(ctypes.get_errno(), "setns failed")
        os.close(fd)


def _serve_one(client: socket.socket, port: int, slots: threading.BoundedSemaphore) -> None:
    try:
        with client:
            first = client.recv(RELAY_CHUNK)
            if not first:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", port), CONNECT_SECONDS)
            except OSError as e:
                if first[:1] == HANDOFF:
                    code = e.errno if isinstance(e.errno, int) and 0 < e.errno < 256 else 111
                    client.sendall(ANSWER_FAILED + bytes([code]))
                return
            with upstream:
                if first[:1] == HANDOFF and len(first) == 1:
                    socket.send_fds(client, [ANSWER_OK], [upstream.fileno()])
                    return
                upstream.settimeout(None)
                upstream.sendall(first)
                relay(client, upstream)
    except OSError:
        pass
    finally:
        slots.release()


def _serve_api(inside: socket.socket, path: str, slots: threading.BoundedSemaphore) -> None:
    """Relay each connection to the workload's loopback API port to the server's socket."""
    while True:
        client, _ = inside.accept()
        slots.acquire()
        threading.Thread(target=_api_one, args=(client, path, slots), daemon=True).start()


def _api_one(client: socket.socket, path: str, slots: threading.BoundedSemaphore) -> None:
    try:
        with client, connect(path, CONNECT_SECONDS) as server:
            server.settimeout(None)
            relay(client, server)
    except OSError:
        pass
    finally:
        slots.release()


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides have ended; an end is passed on as a half-close (a
    reset as an end)."""
    a.settimeout(None)
    b.settimeout(None)
    peers = {a.fileno(): (a, b), b.fileno(): (b, a)}
    poller = select.poll()
    for fd in peers:
        poller.register(fd, select.POLLIN)
    open_ends = 2
    while open_ends:
        for fd, _ in poller.poll():
            source, sink = peers[fd]
            try:
                data = source.recv(RELAY_CHUNK)
            except ConnectionResetError:
                data = b""
            if data:
                sink.sendall(data)
                continue
            poller.unregister(fd)
            open_ends -= 1
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
