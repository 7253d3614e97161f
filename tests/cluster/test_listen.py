"""A job that listens, placed on a joined node, runs on a network of its own there, as on one
machine: the server reaches it only through its node agent's relay (``cluster.relay``), which
takes a connection to the attempt's runner socket for a client that proves the attempt's key.
No port of the node is the workload's: a process on the node can neither call it directly nor
take its port, and a client without the key (or naming anything but an attempt) gets nothing.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import httpx
import psutil
import pytest
from sqlalchemy import select

from gpupool.cluster import relay
from gpupool.domain.endpoints import Endpoint, RelayTarget
from gpupool.executors.base import listening
from gpupool.proxy import client_via
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel
from tests.support.cli import Cli, wait_for, wait_status
from tests.support.pool import Pool
from tests.support.proxying import echo_command


@pytest.fixture(scope="module")
def on_n1(pool: Pool) -> Iterator[tuple[int, Endpoint]]:
    """The echo server as a listening job on n1, running; where the server finds it."""
    pool_cli = Cli(pool.server.url, pool.server.token)
    bearer = {"Authorization": f"Bearer {pool.server.token}"}
    spec = {
        "command": echo_command(),
        "listen": True,
        "resources": {"gpus": 1},
        "gpu_types": ["H100"],  # only n1 has them
    }
    answer = httpx.post(f"{pool.server.url}/api/v1/jobs", json=spec, headers=bearer, timeout=30)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    try:
        job = wait_status(pool_cli, job_id, {"running", "failed", "succeeded"})
        assert job["status"] == "running" and job["placement"]["node"] == "n1", job
        database = Database(Settings(data_dir=pool.server.data_dir).database)
        try:
            with database.reader() as session:  # what the server's Ray executor recorded
                state = session.scalar(
                    select(AttemptModel.executor_state)
                    .where(AttemptModel.job_id == job_id)
                    .order_by(AttemptModel.number.desc())
                )
            found = listening(state["state"])
        finally:
            database.dispose()
        assert found is not None
        yield job_id, found
    finally:
        pool_cli.ok("cancel", str(job_id))
        wait_status(pool_cli, job_id, {"cancelled", "failed", "succeeded", "lost"})


def hello(endpoint: Endpoint) -> dict | None:
    try:
        with client_via(endpoint.via, 5) as client:
            return client.get(f"{endpoint.url}/hello").json()
    except (httpx.HTTPError, OSError):
        return None


def test_a_listening_job_on_a_joined_node_is_reached_through_its_agents_relay(
    on_n1: tuple[int, Endpoint],
) -> None:
    job_id, found = on_n1
    assert found.socket is None and found.relay is not None, found
    assert found.relay.host == "127.0.0.1"  # n1's address, as the pool has it
    assert (found.relay.job_id, found.relay.attempt) == (job_id, 1)
    answered = wait_for(lambda: hello(found), what="the job on n1 to answer through the relay")
    assert answered["port"] == str(found.port)  # its own port, on its own loopback


def test_no_process_on_the_node_calls_the_workload_directly_or_takes_its_port(
    on_n1: tuple[int, Endpoint],
) -> None:
    _, found = on_n1
    wait_for(lambda: hello(found), what="the job on n1 to answer through the relay")
    try:  # the workload does not listen on the node's loopback
        direct = httpx.get(f"http://127.0.0.1:{found.port}/hello", timeout=5)
    except httpx.HTTPError:
        pass
    else:  # another test's job holds that port of the node: it must not be this workload
        assert '"listen_host"' not in direct.text, direct.text
    try:
        squatter = socket.create_server(("127.0.0.1", found.port))  # the node's to take
    except OSError:  # taken already, by another test's job: squatted all the same
        squatter = socket.socket()
    taken = threading.Event()

    def answer_forged() -> None:
        try:
            conn, _ = squatter.accept()
        except OSError:
            return
        taken.set()
        with conn:
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{"forged":1}')

    threading.Thread(target=answer_forged, daemon=True).start()
    try:
        answered = hello(found)  # the workload still answers, not the squatter
        assert answered is not None and "forged" not in answered, answered
        assert answered["port"] == str(found.port)
        assert not taken.is_set()
    finally:
        squatter.close()


def test_the_relay_refuses_a_client_that_does_not_prove_the_attempts_key(
    on_n1: tuple[int, Endpoint],
) -> None:
    job_id, found = on_n1
    target = found.relay
    assert target is not None
    wait_for(lambda: hello(found), what="the job on n1 to answer through the relay")

    def told(header: bytes) -> bytes:
        """What the relay says after its challenge to a client that sends ``header``."""
        with socket.create_connection((target.host, target.port), 10) as conn:
            challenge = json.loads(conn.makefile("rb").readline())
            assert set(challenge) == {"version", "nonce"}
            conn.sendall(header.replace(b"NONCE", challenge["nonce"].encode()))
            return conn.recv(1024)

    def header(key: str, job: object, attempt: object, nonce_proof: bool = True) -> bytes:
        proof = relay.proof(key, "NONCE", job, attempt) if nonce_proof else "00" * 32  # type: ignore[arg-type]
        return json.dumps({"version": 1, "job": job, "attempt": attempt, "proof": proof}).encode()

    assert told(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n") == b""  # no key: not a word
    assert told(header(target.key, job_id, 1, nonce_proof=False) + b"\n") == b""
    other = "ab" * 32  # a key of the client's own making
    assert told(header(other, job_id, 1) + b"\n") == b""
    # the right key's proof for another nonce than the one the relay chose
    stale = relay.proof(target.key, "00" * 32, job_id, 1)
    replayed = json.dumps({"version": 1, "job": job_id, "attempt": 1, "proof": stale})
    assert told(replayed.encode() + b"\n") == b""
    # a path in place of the attempt's numbers, with a proof made for that very path
    for named in ("../../../etc", "/tmp/listen.sock", 1.5, True):
        assert told(header(target.key, named, 1) + b"\n") == b""
        assert told(header(target.key, job_id, named) + b"\n") == b""
    # the attempt's key opens that attempt only
    moved = RelayTarget(target.host, target.port, target.key, job_id + 1, 1)
    with pytest.raises(relay.RelayError):
        relay.connect(moved, 10).close()
    assert hello(found) is not None  # the real client gets through all the same


def test_a_workload_stays_reachable_when_its_nodes_agent_comes_back(
    pool: Pool, on_n1: tuple[int, Endpoint]
) -> None:
    job_id, found = on_n1
    target = found.relay
    assert target is not None
    wait_for(lambda: hello(found), what="the job on n1 to answer through the relay")
    agent = next(
        psutil.Process(c.pid)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == target.port and c.pid
    )
    agent.kill()  # Ray makes it again on its node: same secret, same address and port
    agent.wait(30)
    answered = wait_for(lambda: hello(found), 120, "the job to answer through the agent again")
    assert answered["port"] == str(found.port)
    job = Cli(pool.server.url, pool.server.token).job(job_id)
    assert job["status"] == "running", job  # its runner was not touched
