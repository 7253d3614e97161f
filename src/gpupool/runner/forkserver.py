"""A fork server for runners: one Python start-up serves many launches.

Started by the local executor as ``python -m gpupool.runner --fork-server``. It reads one
attempt directory per line on stdin, forks a runner for it in a new session, and answers the
runner's pid on stdout. Forking this small, already-imported process costs about a
millisecond, where starting a fresh interpreter costs tens. It exits when stdin closes (the
server went away); the runners it forked live on, as runners started any other way do.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import traceback

from gpupool.runner import supervisor
from gpupool.runner.layout import RUNNER_LOG_FILE

REFILL_AFTER_SECONDS = 0.03  # quiet time after a launch before warm namespaces are remade


def main(argv: list[str]) -> int:
    """``[--warm-network DIR PASTA COUNT]``: keep COUNT network namespaces warm under DIR
    with PASTA's egress attached (as root only; elsewhere the option is ignored)."""
    warm = None
    if len(argv) == 4 and argv[0] == "--warm-network" and os.geteuid() == 0:
        from gpupool.runner.warmnet import WarmPool

        try:
            warm = WarmPool(argv[1], argv[2], int(argv[3]))
        except OSError as e:
            print(f"gpupool fork server: no warm network namespaces: {e}", file=sys.stderr)
    elif argv and argv[0] != "--warm-network":
        usage = "usage: python -m gpupool.runner --fork-server [--warm-network DIR PASTA N]"
        print(usage, file=sys.stderr)  # stdout is the answer pipe
        return 2
    preload()
    try:
        return serve(warm)
    finally:
        if warm is not None:
            warm.close()


def preload() -> None:
    """Import here, once, what a runner would otherwise import after each fork (the bridge
    of a serving job, the GPU samplers and NVML's bindings, a gang's fence, a job's Python
    environment: 7-30 ms of CPU each time), then freeze what was loaded: the collector never
    walks those objects again, so a forked runner does not write to, and copy, the pages that
    hold them."""
    import hashlib  # noqa: F401 - an attempt's cgroup name is a digest

    from gpupool.runner import bridge, envbuild, fence, gpumemory, gpusamples  # noqa: F401

    with contextlib.suppress(ImportError):
        import pynvml  # noqa: F401 - nvidia-ml-py; imported only, initialised per use
    gc.collect()
    gc.freeze()


def serve(warm=None) -> int:  # noqa: ANN001 - warm: a warmnet.WarmPool
    """Answer launch requests until stdin closes. A request is an attempt directory, with
    ``\tnet`` after it when its workload gets a network of its own (and ``\tUID``, the
    account it runs as): it is then given a namespace a job of that account gave back, or
    a warm one, if one is ready. The namespaces taken are made again once no launch has
    come for ``REFILL_AFTER_SECONDS`` (at once when none is left): pasta's set-up is
    20-30 ms of CPU, which would otherwise slow down the launch that just took one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when this ends
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished runners
    answers = sys.stdout.buffer
    if warm is not None:
        warm.fill()
    for line in _requests(sys.stdin.fileno(), warm):
        attempt_dir, _, wants = line.decode().partition("\t")
        wants, _, uid = wants.partition("\t")
        slot = warm.take(uid or None) if warm is not None and wants == "net" else None
        pid = os.fork()
        if pid == 0:
            _run_child(attempt_dir, slot)
        answers.write(f"{pid}\n".encode())
        answers.flush()
        if slot is not None:
            os.close(slot.fd)  # the runner's now
    return 0


def _requests(fd: int, warm):  # noqa: ANN001, ANN202 - the request lines, until end of file
    """The lines read from ``fd``; between them, the warm pool refilled when due and the
    namespaces runners gave back taken in (before each line: one may be for it)."""
    pending = b""
    while True:
        while b"\n" not in pending:
            if warm is None:
                ready = [fd]
            else:
                warm.receive()
                wait = warm.next_expiry()
                if warm.wanting():
                    # none left: refill now; else once the last launch had its start
                    refill = REFILL_AFTER_SECONDS if warm.slots else 0.0
                    wait = refill if wait is None else min(wait, refill)
                ready = select.select([fd, warm.returns], [], [], wait)[0]
                if not ready:
                    if warm.wanting():
                        warm.fill()
                    continue
                if fd not in ready:
                    continue  # a namespace given back: taken in at the top
            data = os.read(fd, 4096)
            if not data:
                return
            pending += data
        if warm is not None:
            warm.receive()
        line, pending = pending.split(b"\n", 1)
        yield line


def _run_child(attempt_dir: str, slot=None) -> None:  # noqa: ANN001 - warmnet.Slot
    """In the forked child: become a runner exactly as ``python -m gpupool.runner`` would."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        os.chdir(attempt_dir)
        _redirect_stdio(os.path.join(attempt_dir, RUNNER_LOG_FILE), slot)
        code = supervisor.main([attempt_dir], slot)
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _redirect_stdio(log_path: str, slot=None) -> None:  # noqa: ANN001
    """Standard streams to the runner's log; every other descriptor closed (the request
    and answer pipes, the other warm namespaces), but the warm namespace it was given."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if slot is None:
        os.closerange(3, 256)
        return
    kept = os.dup2(slot.fd, 3, inheritable=False)
    slot.fd = kept
    os.closerange(4, 256)
