"""A node's life through the API, in process: an admin drains it (no new work goes there,
what runs finishes), undrains it, removes it (refused while jobs hold it); the cluster's
down and up steps; the pool's size and the node's events follow every change."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

import gpupool.services.cluster._nodes as nodes
from gpupool.domain.inventory import GpuDevice, NodeInventory, Source
from gpupool.domain.units import GiB
from gpupool.services.platform import Platform
from gpupool.store.models import PoolChangeModel
from tests.support.platform import make_settings, refused, running_app, submit, wait_job
from tests.support.waiting import wait_for

NODES = "/api/v1/nodes"
CPU_ONLY = {"cpus": 1}  # no GPU: the second node has none


@pytest.fixture
def app(tmp_path: Path, database_url: str) -> Iterator[tuple[TestClient, Platform]]:
    """node-a (4 declared A100s, the server's own node) on SQLite and PostgreSQL."""
    with running_app(make_settings(tmp_path / "data", database_url)) as found:
        yield found


def held_until(marker: Path) -> list[str]:
    """A command that runs until ``marker`` exists (two minutes at most)."""
    wait = (
        "import os, time\n"
        "for _ in range(1200):\n"
        f"    if os.path.exists({str(marker)!r}): break\n"
        "    time.sleep(0.1)"
    )
    return [sys.executable, "-c", wait]


def join(platform: Platform, name: str, gpus: int = 0, **where: str) -> None:
    """Register node ``name`` (8 CPUs, ``gpus`` A100s) as the cluster side would."""
    devices = [
        GpuDevice(
            index=i,
            uuid=f"GPU-{name}-{i}",
            name="A100-SXM4-80GB",
            memory_bytes=80 * GiB,
            sources={"uuid": Source.DECLARED},
        )
        for i in range(gpus)
    ]
    inventory = NodeInventory(name=name, cpus=8, memory_bytes=64 * GiB, gpus=devices)
    with platform.db.session() as session:
        nodes.register(session, inventory, platform.clock.now(), **where)
    platform.loop.wake()


def drain(client: TestClient, name: str, reason: str | None = None) -> dict:
    answer = client.post(f"{NODES}/{name}/drain", json={"reason": reason} if reason else None)
    assert answer.status_code == 200, answer.text
    return answer.json()


def undrain(client: TestClient, name: str) -> dict:
    answer = client.post(f"{NODES}/{name}/undrain")
    assert answer.status_code == 200, answer.text
    return answer.json()


def waits_for_nodes(client: TestClient, job_id: int) -> dict:
    """The job's why, once a scheduling cycle has found no node to place it on."""

    def explained() -> dict | None:
        answer = client.get(f"/api/v1/jobs/{job_id}/why").json()
        return answer if answer.get("code") == "NoNodes" else None

    def seen() -> object:  # what it said instead, for the failure
        return client.get(f"/api/v1/jobs/{job_id}/why").json()

    return wait_for(explained, 60, f"job {job_id} to wait for a schedulable node", 0.05, seen)


def last_pool_size(platform: Platform) -> int:
    with platform.db.reader() as session:
        return session.scalars(
            select(PoolChangeModel.gpus).order_by(PoolChangeModel.id.desc()).limit(1)
        ).one()


def test_a_drained_node_runs_its_job_to_the_end_and_takes_no_new_one(
    app: tuple[TestClient, Platform], exchange: Path
) -> None:
    client, _platform = app
    release = exchange / "release"
    running = submit(client, held_until(release), resources={"gpus": 1}, workdir=str(exchange))
    wait_job(client, running["id"], {"running"})

    drained = drain(client, "node-a", "disk swap")
    assert (drained["drain"], drained["drain_reason"], drained["schedulable"]) == (
        True,
        "disk swap",
        False,
    )
    waiting = submit(client, ["true"], resources={"gpus": 1})
    assert waits_for_nodes(client, waiting["id"])["status"] == "pending"
    release.touch()
    assert wait_job(client, running["id"])["status"] == "succeeded", "what ran goes on to its end"
    waits_for_nodes(client, waiting["id"])

    undrained = undrain(client, "node-a")
    assert (undrained["drain"], undrained["drain_reason"], undrained["schedulable"]) == (
        False,
        None,
        True,
    )
    assert wait_job(client, waiting["id"])["status"] == "succeeded"
    shown = client.get(f"{NODES}/node-a").json()
    changes = [(e["reason"], e["actor"]) for e in shown["events"]]
    assert changes[-2:] == [("Drained", "admin"), ("Undrained", "admin")]
    assert "disk swap" in shown["events"][-2]["message"]


def test_new_work_goes_to_the_node_that_is_not_drained(app: tuple[TestClient, Platform]) -> None:
    client, platform = app
    join(platform, "node-b")
    drain(client, "node-a")
    first = submit(client, ["true"], resources=CPU_ONLY)
    assert wait_job(client, first["id"])["placement"]["node"] == "node-b"

    undrain(client, "node-a")
    drain(client, "node-b", "kernel update")
    second = submit(client, ["true"], resources=CPU_ONLY)
    assert wait_job(client, second["id"])["placement"]["node"] == "node-a"
    listed = {node["name"]: node for node in client.get(NODES).json()}
    assert (listed["node-b"]["drain"], listed["node-b"]["drain_reason"]) == (True, "kernel update")
    assert (listed["node-a"]["drain"], listed["node-a"]["schedulable"]) == (False, True)


def test_a_busy_node_is_not_removed_and_an_idle_one_is(
    app: tuple[TestClient, Platform], exchange: Path
) -> None:
    client, platform = app
    removed: list[tuple[str, bool]] = []

    def on_removed(name: str) -> None:  # the cluster side, told after the commit
        with platform.db.reader() as session:
            removed.append((name, name in {n.name for n in nodes.node_rows(session)}))

    platform.on_node_removed = on_removed
    join(platform, "node-b", address="10.0.0.2:7000", fabric_group="ib-0")
    drain(client, "node-a")
    release = exchange / "release"
    busy = submit(client, held_until(release), resources=CPU_ONLY, workdir=str(exchange))
    assert wait_job(client, busy["id"], {"running"})["placement"]["node"] == "node-b"

    error = refused(client.delete(f"{NODES}/node-b"), 409, "node_busy")
    assert error["details"]["jobs"] == [busy["id"]]
    assert str(busy["id"]) in error["message"] and "drain" in error["message"]
    assert removed == []
    release.touch()
    wait_job(client, busy["id"])
    answer = client.delete(f"{NODES}/node-b")
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == "node-b"
    assert removed == [("node-b", False)]
    assert [node["name"] for node in client.get(NODES).json()] == ["node-a"]
    refused(client.get(f"{NODES}/node-b"), 404, "not_found")
    refused(client.post(f"{NODES}/node-b/drain"), 404, "not_found")


def test_a_down_node_is_removed_with_the_jobs_the_pool_lost_on_it(
    app: tuple[TestClient, Platform], exchange: Path
) -> None:
    client, platform = app
    join(platform, "node-b")
    drain(client, "node-a", "   ")
    assert client.get(f"{NODES}/node-a").json()["drain_reason"] is None, "a blank reason is none"
    release = exchange / "release"
    lost = submit(client, held_until(release), resources=CPU_ONLY, workdir=str(exchange))
    assert wait_job(client, lost["id"], {"running"})["placement"]["node"] == "node-b"
    with platform.db.session() as session:
        nodes.mark_down(session, "node-b", platform.clock.now(), "its agent is gone")

    assert client.delete(f"{NODES}/node-b").status_code == 200
    assert [node["name"] for node in client.get(NODES).json()] == ["node-a"]
    release.touch()
    wait_job(client, lost["id"])
    join(platform, "node-b")
    removal = client.get(f"{NODES}/node-b").json()["events"][-2]
    assert removal["reason"] == "Removed" and f"lost jobs {lost['id']}" in removal["message"]


def test_a_removed_node_that_registers_again_is_a_new_join(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    join(platform, "node-b", address="10.0.0.2:7000", fabric_group="ib-0")
    first = client.get(f"{NODES}/node-b").json()
    assert (first["state"], first["address"], first["fabric_group"]) == (
        "up",
        "10.0.0.2:7000",
        "ib-0",
    )
    assert first["joined_at"] is not None and first["down_at"] is None
    drain(client, "node-b", "retiring")
    assert client.delete(f"{NODES}/node-b").status_code == 200

    join(platform, "node-b")
    again = client.get(f"{NODES}/node-b").json()
    assert (again["drain"], again["drain_reason"], again["schedulable"]) == (False, None, True)
    assert [e["reason"] for e in again["events"]] == ["Joined", "Drained", "Removed", "Joined"]
    assert again["events"][2]["actor"] == "admin"
    assert again["address"] == "10.0.0.2:7000", "what the node said of itself is kept"


def test_the_servers_own_node_is_not_removed(app: tuple[TestClient, Platform]) -> None:
    client, _platform = app
    error = refused(client.delete(f"{NODES}/node-a"), 409, "own_node")
    assert "gpupool node drain node-a" in error["message"]
    assert [node["name"] for node in client.get(NODES).json()] == ["node-a"]


def test_only_admins_change_nodes_and_unknown_nodes_are_not_found(
    app: tuple[TestClient, Platform],
) -> None:
    client, _platform = app
    assert client.post("/api/v1/teams", json={"name": "vision"}).status_code == 201
    for name, role in (("mia", "member"), ("vic", "viewer")):
        body = {"name": name, "teams": ["vision"], "role": role}
        assert client.post("/api/v1/users", json=body).status_code == 201
        token = client.post("/api/v1/tokens", json={"name": "t", "user": name}).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        refused(client.post(f"{NODES}/node-a/drain", headers=headers), 403, "forbidden")
        refused(client.post(f"{NODES}/node-a/undrain", headers=headers), 403, "forbidden")
        refused(client.delete(f"{NODES}/node-a", headers=headers), 403, "forbidden")
    assert client.get(f"{NODES}/node-a").json()["drain"] is False
    for answer in (
        client.post(f"{NODES}/nowhere/drain", json={"reason": "x"}),
        client.post(f"{NODES}/nowhere/undrain"),
        client.delete(f"{NODES}/nowhere"),
    ):
        assert "gpupool nodes" in refused(answer, 404, "not_found")["message"]
    refused(
        client.post(f"{NODES}/node-a/drain", json={"reason": "x" * 501}), 422, "invalid_request"
    )
    refused(client.post(f"{NODES}/node-a/drain", json={"why": "typo"}), 422, "invalid_request")


def test_down_and_up_and_the_pool_size_follow_every_change(
    app: tuple[TestClient, Platform],
) -> None:
    client, platform = app
    join(platform, "node-b", gpus=2)
    assert last_pool_size(platform) == 6
    drain(client, "node-b")
    assert last_pool_size(platform) == 4
    drain(client, "node-b", "now with a reason")
    undrain(client, "node-b")
    assert last_pool_size(platform) == 6

    with platform.db.session() as session:
        nodes.mark_down(session, "node-b", platform.clock.now(), "missed 3 health checks")
    down = client.get(f"{NODES}/node-b").json()
    assert (down["state"], down["schedulable"]) == ("down", False)
    assert down["down_at"] is not None
    assert down["events"][-1]["reason"] == "NodeDown" and down["events"][-1]["actor"] is None
    assert "missed 3 health checks" in down["events"][-1]["message"]
    assert last_pool_size(platform) == 4
    drain(client, "node-b", "while down")  # an admin may drain a node that is down
    with platform.db.session() as session:
        nodes.mark_up(session, "node-b", platform.clock.now(), "its agent is back")
    up = client.get(f"{NODES}/node-b").json()
    assert (up["state"], up["down_at"], up["schedulable"]) == ("up", None, False), "still drained"
    assert last_pool_size(platform) == 4
    undrain(client, "node-b")
    assert last_pool_size(platform) == 6
    assert client.delete(f"{NODES}/node-b").status_code == 200
    assert last_pool_size(platform) == 4
    with platform.db.session() as session:  # the cluster may report a removed node lost
        assert nodes.mark_down(session, "node-b", platform.clock.now(), "stopped") is None
