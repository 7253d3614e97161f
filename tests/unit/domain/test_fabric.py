"""Fabric groups, NCCL settings and the gang rule, over the real captures and small inventories."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.discovery.nvidia_smi import nic_affinity, parse_topo_matrix
from gpupool.discovery.rdma_tools import parse_ibstat, parse_ibv_devinfo
from gpupool.discovery.sysfs import read_infiniband_class
from gpupool.domain.fabric import (
    FabricGroup,
    FabricKind,
    GangCandidate,
    NodeAddress,
    common_kind,
    fabric_group,
    fabrics_for_gang,
    nccl_settings,
    rdma_endpoints,
    roce_gid_index,
    why_no_fabric,
)
from gpupool.domain.inventory import (
    GpuDevice,
    LinkKind,
    Nic,
    NodeInventory,
    RdmaDevice,
    RdmaGid,
    RdmaPort,
)

DGX_TOPO = "topo-m_dgx-a100_8x-a100-sxm4-40gb_10-nic_525.105.17_oyanghd.txt"
ASUS_TOPO = "topo-m_asus-esc8000a-e12_4x-rtx6000ada_4-nic_575.51.03_stelline.txt"
ROCE_IBSTAT = "ibstat_h100_roce_8x-cx7-400g_4x-cx6dx-100g_gpud.txt"
CHRYSALIS = "ibv_devinfo-v_chrysalis_cx6-ib_cx5-roce_scorpio.txt"
H100_SYSFS = "sysfs_class_infiniband_h100_gpud"
ETH0 = NodeAddress(address="10.1.2.3", prefix_length=24, interface="eth0")


def port(rate: float = 400, layer: str = "InfiniBand", state: str = "ACTIVE", **extra) -> RdmaPort:
    return RdmaPort(port=1, link_layer=layer, rate_gbps=rate, state=state, **extra)


def node(
    rdma: list[RdmaDevice] | None = None,
    gpus: list[GpuDevice] | None = None,
    nics: list[Nic] | None = None,
) -> NodeInventory:
    return NodeInventory(
        name="n1", cpus=8, memory_bytes=1 << 30, gpus=gpus or [], rdma=rdma or [], nics=nics or []
    )


def gpu(
    index: int, numa: int | None = None, affinity: dict[str, LinkKind] | None = None
) -> GpuDevice:
    return GpuDevice(
        index=index,
        uuid=f"GPU-{index}",
        name="A100",
        memory_bytes=1 << 30,
        numa_node=numa,
        nic_affinity=affinity or {},
    )


def topo_node(captures: Path, name: str, rdma_names: list[str]) -> NodeInventory:
    """A node with a capture's GPUs and NIC affinity, and an active IB port per NIC."""
    topo = parse_topo_matrix((captures / name).read_text())
    affinity = nic_affinity(topo)
    gpus = [gpu(i, topo.numa_affinity[i], affinity[i]) for i in sorted(affinity)]
    rdma = [RdmaDevice(name=n, ports=[port(200)]) for n in rdma_names]
    return node(rdma=rdma, gpus=gpus)


# -- NIC choice by the real topo -m captures -------------------------------------------------


def test_dgx_a100_gpus_get_their_own_pxb_nic_pair(captures: Path) -> None:
    dgx = topo_node(captures, DGX_TOPO, [f"mlx5_{i}" for i in range(10)])
    assert nccl_settings(dgx, [0, 1]).env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}
    assert nccl_settings(dgx, [6]).env["NCCL_IB_HCA"] == "=mlx5_6:1,mlx5_7:1"
    eight = nccl_settings(dgx, range(8), ETH0)
    assert eight.env == {
        "NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8)),  # not storage 8, 9
        "NCCL_SOCKET_IFNAME": "=eth0",
    }
    assert eight.notes == ("RDMA ports nearest the task's GPUs by nvidia-smi topo -m",)
    assert nccl_settings(dgx, [2]).summary == (
        "runs over InfiniBand through mlx5_2:1 and mlx5_3:1 at 200 Gb/s each"
    )


def test_asus_gpus_take_the_nics_of_their_numa_node(captures: Path) -> None:
    asus = topo_node(captures, ASUS_TOPO, [f"mlx5_{i}" for i in range(4)])
    assert nccl_settings(asus, [3]).env["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_3:1"
    assert nccl_settings(asus, [0, 2]).env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"


def test_a_down_port_near_the_gpu_gives_way_to_the_next_nearest(captures: Path) -> None:
    dgx = topo_node(captures, DGX_TOPO, [f"mlx5_{i}" for i in range(10)])
    down = [
        d.model_copy(update={"ports": [port(200, state="DOWN")]})
        if d.name in ("mlx5_0", "mlx5_1")
        else d
        for d in dgx.rdma
    ]
    settings = nccl_settings(dgx.model_copy(update={"rdma": down}), [0])
    # every other NIC is SYS from GPU 0: all the active ones are equally near
    assert settings.env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(2, 10))


# -- the real RDMA captures ------------------------------------------------------------------


def test_h100_sysfs_tree_is_one_400g_infiniband_group(captures: Path) -> None:
    h100 = node(rdma=read_infiniband_class(captures / H100_SYSFS))
    group = fabric_group(h100, ETH0)
    # the capture has no gids/ files: the subnet prefix is unknown, the bond (Ethernet) is
    # not used beside InfiniBand
    assert group == FabricGroup(
        key="infiniband:unknown:400",
        name="InfiniBand 400 Gb/s (subnet unknown)",
        kind=FabricKind.INFINIBAND,
        rate_gbps=400,
    )
    hca = nccl_settings(h100, []).env["NCCL_IB_HCA"]
    assert hca == "=mlx5_0:1,mlx5_1:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"


def test_chrysalis_prefers_infiniband_and_reads_its_subnet_prefix(captures: Path) -> None:
    chrysalis = node(rdma=parse_ibv_devinfo((captures / CHRYSALIS).read_text()))
    group = fabric_group(chrysalis, ETH0)
    assert (group.key, group.name) == (
        "infiniband:fe80::/64:200",
        "InfiniBand 200 Gb/s (subnet fe80::/64)",
    )
    assert nccl_settings(chrysalis, []).env == {"NCCL_IB_HCA": "=mlx5_0:1"}


def test_chrysalis_over_roce_takes_the_gid_index_from_its_table(captures: Path) -> None:
    chrysalis = node(rdma=parse_ibv_devinfo((captures / CHRYSALIS).read_text()))
    settings = nccl_settings(chrysalis, [], over=FabricKind.ROCE)
    assert settings.env == {"NCCL_IB_HCA": "=mlx5_1:1,mlx5_2:1", "NCCL_IB_GID_INDEX": "3"}
    assert settings.notes == ("all active RDMA ports: the task has no GPU",)  # none assumed
    assert settings.summary == "runs over RoCE through mlx5_1:1 and mlx5_2:1 at 100 Gb/s each"


def test_roce_capture_without_gids_assumes_index_3_and_says_so(captures: Path) -> None:
    roce = node(
        rdma=parse_ibstat((captures / ROCE_IBSTAT).read_text()),
        nics=[Nic(name="eth0", speed_mbps=25000)],
    )
    group = fabric_group(roce, ETH0)
    assert (group.key, group.name, group.kind) == (
        "roce:10.1.2.0/24:400",
        "RoCE 400 Gb/s on 10.1.2.0/24",
        FabricKind.ROCE,
    )
    settings = nccl_settings(roce, [], ETH0)
    assert settings.env["NCCL_IB_GID_INDEX"] == "3"
    assert settings.env["NCCL_IB_HCA"].startswith("=mlx5_0:1,mlx5_1:1,mlx5_2:1,")
    assert settings.env["NCCL_IB_HCA"].endswith(",mlx5_10:1,mlx5_11:1")
    assert "GID index 3 assumed" in settings.notes[1]
    assert "mlx5_1:1 (100 Gb/s)" in settings.summary and "mlx5_0:1 (400 Gb/s)" in settings.summary


# -- small inventories -----------------------------------------------------------------------


def test_without_usable_rdma_nccl_runs_over_tcp_and_says_so() -> None:
    plain = node(nics=[Nic(name="eth0", speed_mbps=25000)])
    settings = nccl_settings(plain, [], ETH0)
    assert settings.env == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"}
    assert settings.summary == "runs over TCP on eth0 at 25 Gb/s"
    assert settings.notes == ()
    unknown = nccl_settings(node(), [])
    assert unknown.env == {"NCCL_IB_DISABLE": "1"}
    assert unknown.summary == "runs over TCP on the interface NCCL picks (link speed unknown)"
    down = node(rdma=[RdmaDevice(name="mlx5_0", ports=[port(state="DOWN")])])
    assert nccl_settings(down, []).env == {"NCCL_IB_DISABLE": "1"}


def test_a_gang_sharing_no_rdma_turns_rdma_off_and_notes_it() -> None:
    ib = node(rdma=[RdmaDevice(name="mlx5_0", ports=[port()])])
    settings = nccl_settings(ib, [], over=FabricKind.TCP)
    assert settings.env == {"NCCL_IB_DISABLE": "1"}
    assert settings.notes == ("RDMA is off: the gang's nodes share no RDMA fabric",)
    assert nccl_settings(ib, [], over=FabricKind.ROCE).env == {"NCCL_IB_DISABLE": "1"}


def test_numa_decides_when_topo_affinity_is_missing() -> None:
    rdma = [
        RdmaDevice(name="mlx5_0", numa_node=0, ports=[port()]),
        RdmaDevice(name="mlx5_1", numa_node=1, ports=[port()]),
    ]
    numa = node(rdma=rdma, gpus=[gpu(0, numa=0), gpu(1, numa=1), gpu(2)])
    settings = nccl_settings(numa, [1])
    assert settings.env["NCCL_IB_HCA"] == "=mlx5_1:1"
    assert settings.notes == ("RDMA ports on the NUMA nodes of the task's GPUs",)
    fallback = nccl_settings(numa, [2])
    assert fallback.env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert "no GPU-to-NIC affinity or NUMA node known" in fallback.notes[0]


def test_affinity_of_only_some_gpus_falls_back_to_numa() -> None:
    rdma = [
        RdmaDevice(name="mlx5_0", numa_node=0, ports=[port()]),
        RdmaDevice(name="mlx5_1", numa_node=1, ports=[port()]),
    ]
    gpus = [gpu(0, numa=0, affinity={"mlx5_1": LinkKind.PIX}), gpu(1, numa=0)]
    assert nccl_settings(node(rdma=rdma, gpus=gpus), [0, 1]).env["NCCL_IB_HCA"] == "=mlx5_0:1"
    assert nccl_settings(node(rdma=rdma, gpus=gpus), [0]).env["NCCL_IB_HCA"] == "=mlx5_1:1"


def test_every_active_port_of_a_device_is_listed_in_natural_order() -> None:
    two_ports = RdmaDevice(
        name="mlx5_10", ports=[RdmaPort(port=2, link_layer="InfiniBand", state="ACTIVE"), port()]
    )
    inventory = node(rdma=[two_ports, RdmaDevice(name="mlx5_2", ports=[port()])])
    assert nccl_settings(inventory, []).env["NCCL_IB_HCA"] == "=mlx5_2:1,mlx5_10:1,mlx5_10:2"
    assert [e.spec for e in rdma_endpoints(inventory, FabricKind.ROCE)] == []


def test_a_gpu_the_node_lacks_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match=r"node n1 has no GPU \[3\]"):
        nccl_settings(node(gpus=[gpu(0)]), [0, 3])


def test_gid_index_prefers_roce_v2_ipv4_then_routable_v2() -> None:
    def roce(name: str, *gids: tuple[int, str, str]) -> RdmaDevice:
        table = [RdmaGid(index=i, gid=g, type=t) for i, g, t in gids]
        return RdmaDevice(name=name, ports=[port(100, layer="Ethernet", gids=table)])

    v2_ipv4 = roce(
        "mlx5_0",
        (0, "fe80:0000:0000:0000:0e42:a1ff:fe2b:07a4", "IB/RoCE v1"),
        (1, "fe80:0000:0000:0000:0e42:a1ff:fe2b:07a4", "RoCE v2"),
        (5, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
    )
    v2_ipv6 = roce("mlx5_1", (1, "fe80::1", "RoCE v2"), (4, "2001:db8::1", "RoCE v2"))
    assert nccl_settings(node(rdma=[v2_ipv4]), []).env["NCCL_IB_GID_INDEX"] == "5"
    assert nccl_settings(node(rdma=[v2_ipv6]), []).env["NCCL_IB_GID_INDEX"] == "4"
    endpoints = rdma_endpoints(
        node(rdma=[v2_ipv4, v2_ipv6, v2_ipv4.model_copy(update={"name": "mlx5_2"})]),
        FabricKind.ROCE,
    )
    assert roce_gid_index(endpoints) == (
        5,
        "the ports' RoCE v2 GID indexes differ ([4, 5]): NCCL uses 5",
    )


# -- fabric groups ---------------------------------------------------------------------------


def test_declared_group_wins_but_keeps_the_hardware_kind() -> None:
    ib = node(rdma=[RdmaDevice(name="mlx5_0", ports=[port()])])
    group = fabric_group(ib, ETH0, declared="  rack-7 NDR ")
    assert (group.key, group.name, group.declared) == ("declared:rack-7 NDR", "rack-7 NDR", True)
    assert (group.kind, group.rate_gbps) == (FabricKind.INFINIBAND, 400)
    assert fabric_group(ib, ETH0, declared="  ").declared is False


def test_nodes_without_rdma_group_by_the_subnet_of_their_main_nic() -> None:
    plain = node(nics=[Nic(name="eth0", speed_mbps=10000)])
    group = fabric_group(plain, ETH0)
    assert (group.key, group.name, group.kind, group.rate_gbps) == (
        "tcp:10.1.2.0/24",
        "TCP on 10.1.2.0/24",
        FabricKind.TCP,
        10,
    )
    other = NodeAddress(address="10.1.3.9", prefix_length=24)
    assert fabric_group(plain, other).key == "tcp:10.1.3.0/24"
    assert (
        fabric_group(plain, NodeAddress(address="fd00::5", prefix_length=64)).key == "tcp:fd00::/64"
    )
    assert fabric_group(plain).key == "tcp:unknown"
    assert fabric_group(plain, NodeAddress(address="head", prefix_length=24)).key == "tcp:unknown"


def test_ib_rates_and_subnet_prefixes_split_groups() -> None:
    def ib(rate: float, prefix: str) -> NodeInventory:
        gids = [RdmaGid(index=0, gid=f"{prefix}:0c42:a103:0065:d6b6")]
        return node(rdma=[RdmaDevice(name="mlx5_0", ports=[port(rate, gids=gids)])])

    keys = {
        fabric_group(ib(400, "fe80:0000:0000:0000")).key,
        fabric_group(ib(400, "fe80:0000:0000:0000")).key,
        fabric_group(ib(200, "fe80:0000:0000:0000")).key,
        fabric_group(ib(400, "fec0:0000:0000:0001")).key,
    }
    assert keys == {
        "infiniband:fe80::/64:400",
        "infiniband:fe80::/64:200",
        "infiniband:fec0:0:0:1::/64:400",
    }


def test_common_kind_of_a_gang() -> None:
    ib = FabricGroup(key="a", name="a", kind=FabricKind.INFINIBAND)
    ib2 = FabricGroup(key="b", name="b", kind=FabricKind.INFINIBAND)
    roce = FabricGroup(key="c", name="c", kind=FabricKind.ROCE)
    assert common_kind([ib, ib2]) is FabricKind.INFINIBAND
    assert common_kind([ib, roce]) is FabricKind.TCP


# -- the gang rule ---------------------------------------------------------------------------

IB400 = FabricGroup(key="ib:400", name="IB 400", kind=FabricKind.INFINIBAND, rate_gbps=400)
IB200 = FabricGroup(key="ib:200", name="IB 200", kind=FabricKind.INFINIBAND, rate_gbps=200)
ROCE = FabricGroup(key="roce", name="RoCE 400", kind=FabricKind.ROCE, rate_gbps=400)
TCP = FabricGroup(key="tcp", name="TCP on 10.0.0.0/24", kind=FabricKind.TCP)


def candidates(*rows: tuple[str, FabricGroup, int]) -> list[GangCandidate]:
    return [GangCandidate(node=n, group=g, tasks=t) for n, g, t in rows]


def test_a_gang_goes_to_groups_that_hold_it_fastest_first() -> None:
    pool = candidates(
        ("tcp-1", TCP, 2),
        ("tcp-2", TCP, 2),
        ("roce-1", ROCE, 4),
        ("ib2-1", IB200, 1),
        ("ib2-2", IB200, 3),
        ("ib4-1", IB400, 1),
        ("ib4-10", IB400, 1),
        ("ib4-2", IB400, 1),
    )
    choices = fabrics_for_gang(pool, 3)
    assert [(c.group.key if c.group else None, c.nodes, c.tasks) for c in choices] == [
        ("ib:400", ("ib4-1", "ib4-2", "ib4-10"), 3),
        ("ib:200", ("ib2-1", "ib2-2"), 4),
        ("roce", ("roce-1",), 4),
        ("tcp", ("tcp-1", "tcp-2"), 4),
    ]
    assert [c.group.key for c in fabrics_for_gang(pool, 4) if c.group] == ["ib:200", "roce", "tcp"]


def test_a_gang_spans_groups_only_when_the_job_allows_it() -> None:
    pool = candidates(("a", IB400, 2), ("b", TCP, 2))
    assert fabrics_for_gang(pool, 4) == []
    (across,) = fabrics_for_gang(pool, 4, allow_cross_fabric=True)
    assert (across.group, across.nodes, across.tasks) == (None, ("a", "b"), 4)
    allowed = fabrics_for_gang(pool, 2, allow_cross_fabric=True)
    assert [c.group.key if c.group else None for c in allowed] == ["ib:400", "tcp", None]
    assert fabrics_for_gang(candidates(("a", IB400, 1)), 2, allow_cross_fabric=True) == []


def test_why_a_gang_waits_for_a_fabric_group() -> None:
    pool = candidates(("a", IB400, 2), ("b", TCP, 1))
    assert why_no_fabric(pool, 3) == (
        "no fabric group has room for its 3 tasks (IB 400: 2, TCP on 10.0.0.0/24: 1); "
        "allow_cross_fabric lets it span fabric groups"
    )
    assert why_no_fabric(pool, 3, allow_cross_fabric=True) is None
    assert why_no_fabric(pool, 2) is None
    assert why_no_fabric([], 2, allow_cross_fabric=True) == (
        "no fabric group has room for its 2 tasks (no nodes)"
    )
