"""The platform's proxy in front of a deployment: /serve/NAME/predict against the same replica
called directly, in the same run.

A real server runs two deployments of one replica each:

- ``trivial``: a tiny TorchScript model (written by a job, registered) behind the built-in
  server: well under a millisecond a request, so the proxy's own cost shows at its largest;
- ``ten-ms``: a replica of a command of its own (standard library HTTP) that takes ~10 ms a
  request, as a small real model does.

For each, the baseline is the replica itself (what the proxy forwards to, read from the
server's database): a replica has a network of its own, so the baseline's connections are
sockets handed over by its runner's bridge, straight to the replica's port with nothing in
between, as the proxy's own are; the measured path is the server's /serve address with an
API token. Both
are measured in the same run, interleaved (direct, proxied, direct, proxied, ... one request
after another, each over its own kept-alive connection), after a warm-up that is not counted:
latency (p50, p99) and the absolute time the proxy adds. Requests/s: several clients at once,
in alternating rounds of direct and proxied. The aim: p50 through the proxy within 1.2x of
direct.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpcore
import httpx
import psutil
from harness import FINAL, percentile, start_server, stop_on_sigterm, wait_until
from httpcore._backends.sync import SyncStream
from sqlalchemy import select

from gpupool.domain.deployments import REPLICA_TOKEN_HEADER
from gpupool.executors.base import listening
from gpupool.runner import bridge
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, DeploymentReplicaModel

WARM_UP = 100
IDLE_SECONDS = 3.0  # the server measured alone, before each interleaved run
ROUNDS = {"trivial": 1500, "ten-ms": 300}  # requests each way, interleaved
CLIENTS = 8
RATE_ROUNDS = 3  # rounds of (direct, proxied), each of CLIENTS x PER_CLIENT requests
PER_CLIENT = {"trivial": 100, "ten-ms": 20}
AIM = 1.2
BODY = {"inputs": [[0.1] * 8]}
WRITE_MODEL = (
    "import os, torch; torch.jit.script(torch.nn.Linear(8, 1))"
    ".save(os.environ['GPUPOOL_OUTPUT_DIR'] + '/model.pt')"
)
# a replica of a command of its own that takes ~10 ms to answer (as a small model would)
TEN_MS_SERVER = """
import os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1
    disable_nagle_algorithm = True

    def do_GET(self):
        self._reply(b'{"status": "ok"}')

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(0.010)
        self._reply(b'{"outputs": [[0.5]]}')

    def _reply(self, data):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

address = (os.environ["GPUPOOL_LISTEN_HOST"], int(os.environ["PORT"]))
ThreadingHTTPServer(address, Handler).serve_forever()
"""


@dataclass
class Figures:
    """One path's figures: latencies (ms) one request after another, and requests/s."""

    latencies: list[float]
    rate: float

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)


def main() -> None:
    stop_on_sigterm()
    server = start_server()  # the deployments' loop at its default pace, as a user runs it
    try:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as api:
            replicas = {
                "trivial": deploy_model(api, server.data_dir),
                "ten-ms": deploy_command(api, server.data_dir),
            }
        for name, direct in replicas.items():
            target = Target(f"{server.url}/serve/{name}/predict", headers)
            compare(name, direct, target, psutil.Process(server.process.pid))
    finally:
        server.stop()


@dataclass(frozen=True)
class Target:
    """Where requests go, and the headers they carry."""

    url: str
    headers: dict[str, str]
    socket: str | None = None  # the runner's socket of a replica with a network of its own

    def client(self) -> httpx.Client:
        """A client of this target: to a replica in its own network over handed-over
        sockets (``runner.bridge.handoff``), else over TCP as usual."""
        if self.socket is None:
            return httpx.Client(headers=self.headers, timeout=60)
        transport = httpx.HTTPTransport()
        transport._pool = httpcore.ConnectionPool(network_backend=_Handoff(self.socket))
        return httpx.Client(headers=self.headers, timeout=60, transport=transport)


class _Handoff(httpcore.NetworkBackend):
    """httpcore's connections to a replica in its own network: each one a TCP socket handed
    over by the replica's runner, no relay in the path."""

    def __init__(self, path: str) -> None:
        self.path = path

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # noqa: ANN001, ANN201
        sock = bridge.handoff(self.path, timeout or 10.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return SyncStream(sock)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):  # noqa: ANN001, ANN201
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def deploy_model(api: httpx.Client, data_dir) -> Target:  # noqa: ANN001 - a Path
    """The replica of a tiny TorchScript model behind the built-in server."""
    python = os.path.normpath(sys.executable)  # no '..': the sandbox shows the venv alone
    job = api.post("/api/v1/jobs", json={"command": [python, "-c", WRITE_MODEL]})
    job_id = job.json()["id"]
    wait_until(lambda: api.get(f"/api/v1/jobs/{job_id}").json()["status"] in FINAL, 120)
    registered = api.post("/api/v1/models/bench/versions", json={"job_id": job_id})
    assert registered.status_code == 201, api.get(f"/api/v1/jobs/{job_id}/logs").text
    made = api.post("/api/v1/deployments", json={"model": "bench", "name": "trivial"})
    assert made.status_code == 201, made.text
    return replica_url(api, data_dir, "trivial")


def deploy_command(api: httpx.Client, data_dir) -> Target:  # noqa: ANN001 - a Path
    """The replica of a command that takes ~10 ms a request."""
    python = os.path.normpath(sys.executable)
    spec = {"name": "ten-ms", "command": [python, "-c", TEN_MS_SERVER]}
    made = api.post("/api/v1/deployments", json=spec)
    assert made.status_code == 201, made.text
    return replica_url(api, data_dir, "ten-ms")


def replica_url(api: httpx.Client, data_dir, name: str) -> Target:  # noqa: ANN001 - a Path
    """The /predict URL of the deployment's replica, once it is ready, with the secret the
    platform's proxy sends it (the built-in server refuses any caller without it)."""
    wait_until(lambda: api.get(f"/api/v1/deployments/{name}").json()["ready"] == 1, 120)
    replica_job = api.get(f"/api/v1/deployments/{name}").json()["replica_list"][0]["job_id"]
    database = Database(Settings(data_dir=data_dir).database)
    try:
        with database.reader() as session:  # where the server's executor recorded it listens
            state = session.scalar(
                select(AttemptModel.executor_state)
                .where(AttemptModel.job_id == replica_job)
                .order_by(AttemptModel.number.desc())
            )
            found = listening(state["state"])
            url = f"{found.url}/predict"
            token = session.scalar(
                select(DeploymentReplicaModel.token).where(
                    DeploymentReplicaModel.job_id == replica_job
                )
            )
        return Target(url, {REPLICA_TOKEN_HEADER: token} if token else {}, found.socket)
    finally:
        database.dispose()


def compare(name: str, to_replica: Target, to_serve: Target, server: psutil.Process) -> None:
    """Print both paths' figures for one replica, and how they compare; and the server's CPU
    per proxied request: direct requests never reach it, so what it spent in the
    interleaved run, less what its pipelines spend anyway (its rate over IDLE_SECONDS just
    before), is the proxied requests'."""
    idle_rate = _cpu_rate(server, IDLE_SECONDS)
    before, began = sum(server.cpu_times()[:2]), time.monotonic()
    direct, proxied = interleaved(to_replica, to_serve, ROUNDS[name])
    spent = sum(server.cpu_times()[:2]) - before - idle_rate * (time.monotonic() - began)
    server_ms = 1000 * spent / ROUNDS[name]
    direct_rate, proxied_rate = rates(to_replica, to_serve, PER_CLIENT[name])
    base, through = Figures(direct, direct_rate), Figures(proxied, proxied_rate)
    print(f"{name} replica ({ROUNDS[name]} requests each way, interleaved; {CLIENTS} clients)")
    line("  direct to the replica", base)
    line("  through /serve", through)
    ratio = through.p50 / base.p50
    print(
        f"  through /serve vs direct: p50 {ratio:.2f}x (aim <= {AIM}x: "
        f"{'met' if ratio <= AIM else 'not met'}), p99 {through.p99 / base.p99:.2f}x, "
        f"requests/s {through.rate / base.rate:.2f}x; the proxy adds "
        f"{through.p50 - base.p50:.2f} ms at p50, "
        f"{statistics.fmean(proxied) - statistics.fmean(direct):.2f} ms on the mean"
    )
    print(
        f"  the server's CPU per proxied request: {server_ms:.2f} ms "
        f"(its pipelines' own, {1000 * idle_rate:.0f} ms a second, left out)"
    )


def _cpu_rate(process: psutil.Process, seconds: float) -> float:
    """CPU seconds per second that ``process`` spends over the next ``seconds``."""
    before = sum(process.cpu_times()[:2])
    time.sleep(seconds)
    return (sum(process.cpu_times()[:2]) - before) / seconds


def line(what: str, figures: Figures) -> None:
    print(
        f"{what:24s} p50 {figures.p50:6.2f} ms  p99 {figures.p99:6.2f} ms  "
        f"mean {statistics.fmean(figures.latencies):6.2f} ms   {figures.rate:7.0f} requests/s"
    )


def interleaved(
    to_replica: Target, to_serve: Target, rounds: int
) -> tuple[list[float], list[float]]:
    """Latencies (ms) of ``rounds`` requests each way, one direct then one proxied, each
    path over its own kept-alive connection; the warm-up is not counted."""
    direct_ms: list[float] = []
    proxied_ms: list[float] = []
    with (
        to_replica.client() as direct,
        to_serve.client() as proxied,
    ):
        for _ in range(WARM_UP):
            timed(direct, to_replica.url)
            timed(proxied, to_serve.url)
        for _ in range(rounds):
            direct_ms.append(timed(direct, to_replica.url))
            proxied_ms.append(timed(proxied, to_serve.url))
    return direct_ms, proxied_ms


def timed(client: httpx.Client, url: str) -> float:
    began = time.perf_counter()
    answer = client.post(url, json=BODY)
    seconds = time.perf_counter() - began
    assert answer.status_code == 200, answer.text
    return seconds * 1000


def rates(to_replica: Target, to_serve: Target, per_client: int) -> tuple[float, float]:
    """Requests/s of each path with CLIENTS clients at once, in alternating rounds."""
    direct = proxied = 0.0
    for _ in range(RATE_ROUNDS):
        direct += concurrent(to_replica, per_client)
        proxied += concurrent(to_serve, per_client)
    total = RATE_ROUNDS * CLIENTS * per_client
    return total / direct, total / proxied


def concurrent(target: Target, per_client: int) -> float:
    """Seconds for CLIENTS clients to make ``per_client`` requests each (connections made
    and warmed before the clock starts)."""
    clients = [target.client() for _ in range(CLIENTS)]
    try:
        for client in clients:
            timed(client, target.url)

        def one_client(client: httpx.Client) -> None:
            for _ in range(per_client):
                timed(client, target.url)

        began = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(one_client, clients))
        return time.perf_counter() - began
    finally:
        for client in clients:
            client.close()


if __name__ == "__main__":
    main()
