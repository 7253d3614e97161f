"""A fork server for runners: one Python start-up serves many launches.

Started by the local executor as ``python -m gpupool.runner --fork-server``. It reads one
attempt directory per line on stdin, forks a runner for it in a new session, and answers the
runner's pid on stdout. Forking this small, already-imported process costs about a
millisecond, where starting a fresh interpreter costs tens. It exits when stdin closes (the
server went away); the runners it forked live on, as runners started any other way do.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

from gpupool.runner import supervisor
from gpupool.runner.layout import RUNNER_LOG_FILE


def serve() -> int:
    """Answer launch requests until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when this ends
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished runners
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    while line := requests.readline():
        attempt_dir = line.decode().strip()
        pid = os.fork()
        if pid == 0:
            _run_child(attempt_dir)
        answers.write(f"{pid}\n".encode())
        answers.flush()
    return 0


def _run_child(attempt_dir: str) -> None:
    """In the forked child: become a runner exactly as ``python -m gpupool.runner`` would."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setsid()
        os.chdir(attempt_dir)
        _redirect_stdio(os.path.join(attempt_dir, RUNNER_LOG_FILE))
        code = supervisor.main([attempt_dir])
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _redirect_stdio(log_path: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 256)  # the request and answer pipes, and anything else inherited
