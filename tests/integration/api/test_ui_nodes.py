"""The nodes page (the cluster page, /) and GET /api/v1/pool: the pool's summary, nodes by
fabric group, each node's topology matrix, NICs and RDMA devices, what its jobs hold; a
drained node's GPUs are not free, and a job that waits because every node is drained is
told so.

Against a real server whose declared GPUs have links, and an in-process app where nodes of
several fabric groups join as the cluster side registers them."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

import gpupool.services.cluster._nodes as nodes
from gpupool.domain.inventory import (
    GpuDevice,
    LinkKind,
    Nic,
    NodeInventory,
    RdmaDevice,
    RdmaPort,
)
from gpupool.domain.units import GiB
from gpupool.services.platform import Platform
from tests.support.platform import make_settings, running_app
from tests.support.server import ServerProcess
from tests.support.waiting import wait_for
from tests.support.web import submit

LINKS = "0-1:NV4,2-3:PIX"
MATRIX = [["X", "NV4", "", ""], ["NV4", "X", "", ""], ["", "", "X", "PIX"], ["", "", "PIX", "X"]]


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real server (4 declared A100s) whose GPUs 0-1 share NVLink and 2-3 a PCIe switch;
    it stands in for tests/integration/api/conftest.py's, so ``admin`` signs in here."""
    data = tmp_path_factory.mktemp("nodes-ui") / "data"
    process = ServerProcess(data, env={"GPUPOOL_DECLARED_LINKS": LINKS}).start()
    yield process
    process.stop()


def test_the_page_shows_the_topology_matrix_in_the_nodes_fabric_group(
    admin: tuple[httpx.Client, str],
) -> None:
    client, _ = admin
    pool = client.get("/api/v1/pool").json()
    (group,) = pool["groups"]
    (node,) = group["nodes"]
    assert (group["name"], group["gpus"]) == (None, 4)
    assert node["topology"] == {"gpus": [0, 1, 2, 3], "nics": [], "cells": MATRIX, "reported": True}

    page = client.get("/").text
    section = fabric_section(page, "")
    assert "No fabric group" in section and "1 node · 4 GPUs" in section
    matrix = one(r'<table class="matrix" aria-label="GPU topology of [^"]+">.*?</table>', section)
    assert table_cells(matrix) == [[cell or "-" for cell in row] for row in MATRIX]
    assert '<td class="link-nv">NV4</td>' in matrix and '<td class="link-pix">PIX</td>' in matrix
    assert '<details class="topology" data-part="topology" open>' in section  # 4 GPUs: open
    assert "NV#</strong> NVLink, # links" in section  # the legend
    assert (
        text_of(one(r'<p class="summary" id="summary">.*?</p>', page))
        == "4 GPUs · 0 in use · 4 free"
    )
    assert "A100-SXM4-80GB: 4 of 4 free" in text_of(
        one(r'<ul class="summary models".*?</ul>', page)
    )


def test_usage_and_the_summary_follow_a_job_and_a_drain(admin: tuple[httpx.Client, str]) -> None:
    client, csrf = admin
    name = client.get("/api/v1/nodes").json()[0]["name"]
    held = submit(client, csrf, resources={"gpus": 1, "cpus": 2, "memory_bytes": "8GiB"})
    running(client, held["id"])
    try:
        (node,) = client.get("/api/v1/pool").json()["groups"][0]["nodes"]
        usage = node["usage"]
        assert (usage["gpus_held"], usage["gpu_share"]) == (1, 0.25)
        assert (usage["cpus_held"], usage["cpus"], usage["memory_held_bytes"]) == (2, 64, 8 * GiB)
        uses = text_of(one(r'<ul class="usage".*?</ul>', client.get("/").text))
        assert "GPUs held 1 of 4 (25%)" in uses and "CPUs held 2 of 64 (3%)" in uses
        assert "Memory held 8 GiB of 256 GiB (3%)" in uses

        post(client, csrf, f"/api/v1/nodes/{name}/drain", {"reason": "disk swap"})
        summary = client.get("/api/v1/pool").json()["summary"]
        assert (summary["up"], summary["drained"], summary["down"]) == (0, 1, 0)
        assert (summary["in_use"], summary["free"], summary["unavailable"]) == (1, 0, 3)
        page = client.get("/").text
        shown = text_of(one(r'<p class="summary" id="summary">.*?</p>', page))
        assert shown == "4 GPUs · 1 in use · 0 free · 3 idle on drained or down nodes"
        assert page.count("Idle: the node is drained") == 3 and ">Free<" not in page
        assert "1 node: 0 up · 1 drained · 0 down" in text_of(page)

        waiting = submit(client, csrf, resources={"gpus": 1})["id"]
        why = wait_for(lambda: said(client, waiting, "every node is drained"), 30, "a reason")
        assert why["code"] == "NoNodes"
        assert (
            f"every node is drained ({name}); it waits until an admin undrains one"
            in why["message"]
        )
    finally:
        post(client, csrf, f"/api/v1/nodes/{name}/undrain")
        for job in client.get("/api/v1/jobs").json():
            if job["status"] in ("pending", "starting", "running"):
                post(client, csrf, f"/api/v1/jobs/{job['id']}/cancel")


@pytest.fixture
def pool_app(tmp_path: Path) -> Iterator[tuple[TestClient, Platform]]:
    """node-a (4 declared A100s, no links, no fabric group) with a signed-in page session."""
    with running_app(make_settings(tmp_path / "data")) as (client, platform):
        token = client.headers["Authorization"].removeprefix("Bearer ")
        answer = client.post("/api/v1/session", json={"user": "admin", "password": token})
        assert answer.status_code == 200, answer.text
        yield client, platform


def test_nodes_are_grouped_by_fabric_group_with_their_nics_and_rdma_ports(
    pool_app: tuple[TestClient, Platform],
) -> None:
    client, platform = pool_app
    join(platform, "node-d", "roce-1", drained=True)
    join(platform, "node-c", "ib-0")
    join(platform, "node-b", "ib-0")

    pool = client.get("/api/v1/pool").json()
    assert [(g["name"], [n["name"] for n in g["nodes"]]) for g in pool["groups"]] == [
        ("ib-0", ["node-b", "node-c"]),
        ("roce-1", ["node-d"]),
        (None, ["node-a"]),
    ]
    summary = pool["summary"]
    assert (summary["nodes"], summary["up"], summary["drained"], summary["down"]) == (4, 3, 1, 0)
    assert (summary["gpus"], summary["free"], summary["unavailable"]) == (10, 8, 2)
    assert [(m["model"], m["gpus"], m["free"]) for m in summary["by_model"]] == [
        ("A100-SXM4-80GB", 4, 4),
        ("H100", 6, 4),
    ]

    page = client.get("/").text
    heads = re.findall(r'<section class="fabric-group" data-group="([^"]*)"', page)
    assert heads == ["ib-0", "roce-1", ""]
    ib = fabric_section(page, "ib-0")
    assert "Fabric group ib-0" in ib and "2 nodes · 4 GPUs" in ib
    assert re.findall(r'<section class="node card" data-node="([^"]+)"', ib) == ["node-b", "node-c"]
    matrix = one(r'<table class="matrix" aria-label="GPU topology of node-b">.*?</table>', ib)
    assert table_cells(matrix) == [["X", "NV8", "PIX", "SYS"], ["NV8", "X", "SYS", "PIX"]]
    assert "GPU0" in matrix and ">mlx5_0</th>" in matrix and ">mlx5_1</th>" in matrix
    nics = table_cells(
        one(r'<table class="table compact nics" aria-label="NICs of node-b">.*?</table>', ib)
    )
    assert nics == [
        ["ib0", "up", "200 Gb/s", "4092", "mlx5_0"],
        ["ib1", "down", "-", "-", "mlx5_1"],
    ]
    ports = table_cells(
        one(
            r'<table class="table compact rdma" aria-label="RDMA devices of node-b">.*?</table>', ib
        )
    )
    assert ports == [
        ["mlx5_0", "1", "InfiniBand", "200 Gb/s", "ACTIVE", "LinkUp", "0"],
        ["mlx5_1", "1", "InfiniBand", "-", "DOWN", "Disabled", "1"],
    ]
    roce = fabric_section(page, "roce-1")
    assert roce.count("Idle: the node is drained") == 2 and ">Free<" not in roce
    unlinked = fabric_section(page, "")  # node-a's inventory names no link: no matrix
    assert "GPU topology: not reported" in unlinked and "GPUPOOL_DECLARED_LINKS" in unlinked
    assert '<table class="matrix"' not in unlinked


def test_a_big_nodes_matrix_starts_collapsed(pool_app: tuple[TestClient, Platform]) -> None:
    client, platform = pool_app
    devices = [
        GpuDevice(index=i, uuid=f"GPU-big-{i}", name="H100", memory_bytes=80 * GiB)
        for i in range(16)
    ]
    links = [
        {"a": 0, "b": i, "kind": "NVLINK", "nvlinks": 18, "source": "nvml"} for i in range(1, 16)
    ]
    inventory = NodeInventory(
        name="big", cpus=224, memory_bytes=2048 * GiB, gpus=devices, links=links
    )
    with platform.db.session() as session:
        nodes.register(session, inventory, platform.clock.now(), fabric_group="nvl-1")

    section = fabric_section(client.get("/").text, "nvl-1")
    assert '<details class="topology" data-part="topology">' in section  # not open
    assert "GPU topology: 16 GPUs" in section
    assert len(table_cells(one(r'<table class="matrix".*?</table>', section))) == 16
    join(platform, "small", "ib-0")  # 2 GPUs: open
    small = fabric_section(client.get("/").text, "ib-0")
    assert '<details class="topology" data-part="topology" open>' in small


def join(platform: Platform, name: str, fabric: str, drained: bool = False) -> None:
    """Register ``name`` (2 H100s on NVLink, each near one of two InfiniBand ports) as the
    cluster side would, in fabric group ``fabric``."""
    affinity = [
        {"mlx5_0": LinkKind.PIX, "mlx5_1": LinkKind.SYS},
        {"mlx5_0": LinkKind.SYS, "mlx5_1": LinkKind.PIX},
    ]
    devices = [
        GpuDevice(
            index=i,
            uuid=f"GPU-{name}-{i}",
            name="H100",
            memory_bytes=80 * GiB,
            nic_affinity=affinity[i],
        )
        for i in range(2)
    ]
    inventory = NodeInventory(
        name=name,
        cpus=32,
        memory_bytes=128 * GiB,
        gpus=devices,
        links=[{"a": 0, "b": 1, "kind": "NVLINK", "nvlinks": 8, "source": "nvml"}],
        nics=[
            Nic(name="lo", operstate="unknown"),
            Nic(name="ib0", speed_mbps=200_000, operstate="up", mtu=4092, rdma_device="mlx5_0"),
            Nic(name="ib1", operstate="down", rdma_device="mlx5_1"),
        ],
        rdma=[
            RdmaDevice(
                name="mlx5_0",
                numa_node=0,
                ports=[
                    RdmaPort(
                        port=1,
                        link_layer="InfiniBand",
                        rate_gbps=200,
                        state="ACTIVE",
                        phys_state="LinkUp",
                    )
                ],
            ),
            RdmaDevice(
                name="mlx5_1",
                numa_node=1,
                ports=[
                    RdmaPort(port=1, link_layer="InfiniBand", state="DOWN", phys_state="Disabled")
                ],
            ),
        ],
    )
    with platform.db.session() as session:
        node = nodes.register(session, inventory, platform.clock.now(), fabric_group=fabric)
        if drained:
            nodes.set_drain(session, node, platform.clock.now(), "retiring", "admin")
    platform.loop.wake()


# -- reading the page -------------------------------------------------------------------------


def one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, re.S)
    assert len(found) == 1, (pattern, len(found))
    return found[0]


def fabric_section(page: str, group: str) -> str:
    """The markup of one fabric group's section (up to the next one's)."""
    start = page.index(f'<section class="fabric-group" data-group="{group}"')
    end = page.find('<section class="fabric-group"', start + 1)
    return page[start : end if end > 0 else len(page)]


def table_cells(table: str) -> list[list[str]]:
    """The text of each body row's <td> cells."""
    body = one(r"<tbody>.*?</tbody>", table)
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    return [
        [text_of(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)] for row in rows
    ]


def text_of(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


# -- the API ------------------------------------------------------------------------------------


def post(client: httpx.Client, csrf: str, path: str, body: dict | None = None) -> dict:
    answer = client.post(path, json=body, headers={"x-csrf-token": csrf})
    assert answer.is_success, answer.text
    return answer.json()


def running(client: httpx.Client, job_id: int) -> dict:
    def check() -> dict | None:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        assert job["status"] in ("pending", "starting", "running"), job
        return job if job["status"] == "running" else None

    return wait_for(check, 60, f"job {job_id} to run", 0.1)


def said(client: httpx.Client, job_id: int, text: str) -> dict | None:
    answer = client.get(f"/api/v1/jobs/{job_id}/why").json()
    return answer if text in answer.get("message", "") else None
