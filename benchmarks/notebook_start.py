"""A notebook's start: from `POST /notebooks` to the first reply of a kernel through the
proxy, against JupyterLab started directly in the same run (the baseline: its own start-up,
and its first kernel reply on its own port, with no scheduler, sandbox or proxy).

Each run through gpupool: start a notebook (no GPU), wait until its JupyterLab answers
through the proxy, start a kernel and run `print(1 + 1)` over its WebSocket; then stop it
and wait until it has stopped. Each direct run: the same command line and token handling
(`domain.notebooks.launch_command`) in a fresh directory, unsandboxed, on a free port.

    .venv/bin/python benchmarks/notebook_start.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import time

import httpx
from harness import client, percentile, scratch, start_server, stop_on_sigterm, wait_until
from tests.support.notebooks import Lab
from tests.support.server import ServerProcess

from gpupool.domain.notebooks import launch_command, token_env

RUNS = 5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    runs = parser.parse_args().runs
    stop_on_sigterm()
    server = start_server()
    api = client(server)
    up, reply, through = [], [], []
    try:
        for _ in range(runs):  # interleaved, so that neither side gets the warmer machine
            direct = _direct()
            up.append(direct[0])
            reply.append(direct[1])
            through.append(_through_gpupool(server, api))
    finally:
        server.stop()
    print(f"notebook start -> first kernel reply, {runs} runs each (p50, p95)")
    print(f"  through gpupool (submit, schedule, sandbox, proxy): {_p(through)}")
    print(f"  JupyterLab directly, first kernel reply:            {_p(reply)}")
    print(f"  JupyterLab directly, its own start-up:              {_p(up)}")
    total, own = percentile(through, 50), percentile(up, 50)
    print(f"JupyterLab's own start-up is {own / total:.0%} of the p50 through gpupool;")
    print(f"gpupool adds {total - percentile(reply, 50):+.2f} s to the direct first reply (p50)")


def _through_gpupool(server: ServerProcess, api: httpx.Client) -> float:
    """One notebook: started, its first kernel reply through the proxy, stopped."""
    began = time.perf_counter()
    made = api.post("/notebooks", json={}).json()
    lab = Lab(server.url, made["id"], server.token)
    took = _first_reply(lab, began)
    lab.close()
    api.post(f"/notebooks/{made['id']}/stop")
    wait_until(lambda: _stopped(api, made["id"]), 120)
    return took


def _direct() -> tuple[float, float]:
    """Seconds to JupyterLab's first answer, and to its first kernel reply."""
    token, port = secrets.token_urlsafe(32), _free_port()
    work = scratch("gpupool-bench-lab-")
    env = os.environ | token_env(token) | {"PORT": str(port), "GPUPOOL_LISTEN_HOST": "127.0.0.1"}
    env |= {"TMPDIR": str(work), "HOME": str(work)}
    began = time.perf_counter()
    process = subprocess.Popen(
        launch_command(sys.executable, 1),
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lab = Lab(f"http://127.0.0.1:{port}", 1, token, scheme="token")
        lab.answering()
        up = time.perf_counter() - began
        return up, _first_reply(lab, began)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _first_reply(lab: Lab, began: float) -> float:
    lab.answering(timeout=120)
    assert lab.run(lab.start_kernel(), "print(1 + 1)").strip() == "2"
    return time.perf_counter() - began


def _stopped(api: httpx.Client, notebook: int) -> bool:
    return api.get(f"/notebooks/{notebook}").json()["state"] == "stopped"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _p(values: list[float]) -> str:
    return f"p50 {percentile(values, 50):6.2f} s   p95 {percentile(values, 95):6.2f} s"


if __name__ == "__main__":
    main()
