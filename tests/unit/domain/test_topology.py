"""Connectivity domains from real ``nvidia-smi topo -m`` captures and declared inventories,
and what the scheduler does with them (multi-GPU tasks inside one domain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.discovery import declared_report
from gpupool.discovery.declared import parse_declared_gpus, parse_declared_links
from gpupool.discovery.nvidia_smi import parse_topo_matrix
from gpupool.domain.inventory import (
    GpuDevice,
    GpuLink,
    LinkKind,
    MigDevice,
    NodeInventory,
    Source,
)
from gpupool.domain.topology import gpu_domains
from gpupool.domain.units import GiB
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Snapshot
from gpupool.services.cluster import capacity
from gpupool.settings import Settings
from gpupool.store.models import NodeModel
from tests.support.clock import ManualClock
from tests.support.scheduling import pending

DGX = "topo-m_dgx-a100_8x-a100-sxm4-40gb_10-nic_525.105.17_oyanghd.txt"
TEMPURA = "topo-m_8x-quadro-rtx6000_pcie-switches_tempura.txt"
ASUS = "topo-m_asus-esc8000a-e12_4x-rtx6000ada_4-nic_575.51.03_stelline.txt"
H100_EXPORTER = "nvsmi-capture_h100-80gb-hbm3_mig_590.48.01_nvidia_gpu_exporter.txt"


def inventory_from_topo(text: str, name: str = "n") -> NodeInventory:
    """A node with the GPUs, links and NUMA nodes that ``nvidia-smi topo -m`` shows."""
    topo = parse_topo_matrix(text)
    gpus = parse_declared_gpus(f"{len(topo.numa_affinity)}xGPU:40GiB", name)
    for gpu in gpus:
        gpu.numa_node = topo.numa_affinity[gpu.index]
    return NodeInventory(name=name, cpus=64, memory_bytes=512 * GiB, gpus=gpus, links=topo.links)


def declared(gpus: str, links: str = "", name: str = "n") -> NodeInventory:
    devices = parse_declared_gpus(gpus, name)
    return NodeInventory(
        name=name,
        cpus=64,
        memory_bytes=512 * GiB,
        gpus=devices,
        links=parse_declared_links(links, len(devices)),
    )


def domains_of(inventory: NodeInventory) -> dict[int, int]:
    """GPU index -> domain, as the scheduler gets it from the stored node."""
    node = NodeModel(name=inventory.name, inventory=inventory.model_dump(mode="json"))
    node.schedulable = True
    return {gpu.index: gpu.domain for gpu in capacity(node).gpus}


def placed_indexes(inventory: NodeInventory, gpus: int) -> list[int]:
    """The GPU indexes the real scheduler gives one job of ``gpus`` whole GPUs on the node."""
    node = NodeModel(name=inventory.name, inventory=inventory.model_dump(mode="json"))
    node.schedulable = True
    cap = capacity(node)
    job = pending(1, team="team", user="user", submitted=0.0, gpus=gpus)
    (placement,) = schedule(
        Snapshot(nodes=(cap,), allocations=(), pending=(job,)), ManualClock()
    ).placements
    index = {gpu.uuid: gpu.index for gpu in cap.gpus}
    return sorted(index[share.uuid] for share in placement.gpus)


# -- real captures ---------------------------------------------------------------------------


def test_dgx_a100_nvswitch_makes_one_domain(captures: Path) -> None:
    assert domains_of(inventory_from_topo((captures / DGX).read_text())) == dict.fromkeys(
        range(8), 0
    )


def test_tempura_pcie_switches_make_two_domains(captures: Path) -> None:
    """PIX inside {0,1,6,7} and {2,3,4,5}; PXB between them: two switches under a third."""
    inventory = inventory_from_topo((captures / TEMPURA).read_text())
    assert domains_of(inventory) == {0: 0, 1: 0, 6: 0, 7: 0, 2: 2, 3: 2, 4: 2, 5: 2}
    assert placed_indexes(inventory, 4) in ([0, 1, 6, 7], [2, 3, 4, 5])
    assert placed_indexes(inventory, 2) in ([0, 1], [2, 3])


def test_asus_numa_nodes_make_two_domains(captures: Path) -> None:
    """No NVLink, no shared switch: NODE links and the NUMA affinity pair {0,1} and {2,3}."""
    inventory = inventory_from_topo((captures / ASUS).read_text())
    assert domains_of(inventory) == {0: 0, 1: 0, 2: 2, 3: 2}
    numa_only = inventory.model_copy(update={"links": []})
    assert domains_of(numa_only) == {0: 0, 1: 0, 2: 2, 3: 2}
    links_only = inventory.model_copy(
        update={"gpus": [g.model_copy(update={"numa_node": None}) for g in inventory.gpus]}
    )
    assert domains_of(links_only) == {0: 0, 1: 0, 2: 2, 3: 2}


def test_a_single_gpu_capture_is_one_domain(captures: Path, section) -> None:  # noqa: ANN001
    text = section(captures / H100_EXPORTER, "nvidia-smi topo -m")
    assert domains_of(inventory_from_topo(text)) == {0: 0}


# -- declared inventories and the rule itself ------------------------------------------------


def test_two_nvlink_pairs_are_two_domains_and_a_pair_is_placed_together() -> None:
    inventory = declared("4xA100:80GiB", "0-2:NV4,1-3:NV4,0-1:SYS,2-3:SYS")
    assert domains_of(inventory) == {0: 0, 2: 0, 1: 1, 3: 1}
    assert placed_indexes(inventory, 2) == [0, 2]


def test_without_topology_the_node_is_one_domain() -> None:
    assert domains_of(declared("4xA100:80GiB")) == dict.fromkeys(range(4), 0)


def test_nvlink_first_then_pcie_switch_then_numa_node_then_alone() -> None:
    gpus = [
        GpuDevice(index=i, uuid=f"GPU-{i}", name="X", memory_bytes=GiB, numa_node=numa)
        for i, numa in enumerate([0, 0, 0, 0, 1, 1, None])
    ]
    links = [
        GpuLink(a=a, b=b, kind=kind, nvlinks=2 if kind is LinkKind.NVLINK else 0, source="declared")
        for a, b, kind in [
            (0, 1, LinkKind.NVLINK),
            (0, 2, LinkKind.PIX),  # 0 already has NVLink: it stays with 1
            (1, 2, LinkKind.PIX),
            (2, 3, LinkKind.PIX),
            (4, 5, LinkKind.SYS),  # same NUMA node all the same
        ]
    ]
    assert gpu_domains(gpus, links) == {0: 0, 1: 0, 2: 2, 3: 2, 4: 4, 5: 4, 6: 6}


def test_pix_switches_before_the_pxb_tree_above_them() -> None:
    links = ",".join(["0-1:PIX", "2-3:PIX", "0-2:PXB", "1-3:PXB", "4-5:PXB", "0-4:PHB"])
    assert domains_of(declared("6xT4:16GiB", links)) == {0: 0, 1: 0, 2: 2, 3: 2, 4: 4, 5: 4}


def test_mig_instances_share_their_gpus_domain() -> None:
    inventory = declared("2xA100:80GiB", "0-1:SYS")
    mig = inventory.gpus[1].model_copy(
        update={
            "mig_enabled": True,
            "mig_devices": [
                MigDevice(uuid=f"MIG-{i}", profile="3g.40gb", memory_bytes=40 * GiB)
                for i in range(2)
            ],
        }
    )
    inventory = inventory.model_copy(update={"gpus": [inventory.gpus[0], mig]})
    node = NodeModel(name="n", inventory=inventory.model_dump(mode="json"))
    node.schedulable = True
    assert {g.uuid: g.domain for g in capacity(node).gpus} == {
        "GPU-declared-n-0": 0,
        "MIG-0": 1,
        "MIG-1": 1,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0-0:NV4", "two different GPUs"),
        ("0-4:NV4", "indexes 0-3"),
        ("0:NV4", "GPU-GPU:KIND"),
        ("0-1:FAST", "unknown kind 'FAST'"),
    ],
)
def test_bad_declared_links_say_how_to_write_them(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_declared_links(text, 4)


def test_declared_links_come_from_the_settings_and_say_so() -> None:
    settings = Settings(declared_gpus="4xA100:80GiB", declared_links="0-2:nv4, 1-3:PIX")
    report = declared_report(settings, "n")
    assert [(link.a, link.b, link.kind, link.nvlinks) for link in report.links] == [
        (0, 2, LinkKind.NVLINK, 4),
        (1, 3, LinkKind.PIX, 0),
    ]
    assert {link.source for link in report.links} == {Source.DECLARED}
    with pytest.raises(ValueError, match="indexes 0-1"):
        declared_report(Settings(declared_gpus="2xA100:80GiB", declared_links="0-2:NV4"), "n")
