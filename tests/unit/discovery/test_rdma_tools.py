"""``ibv_devinfo -v`` and ``ibstat`` parsing over the real captures."""

from __future__ import annotations

from pathlib import Path

from gpupool.discovery.rdma_tools import parse_ibstat, parse_ibv_devinfo
from gpupool.discovery.sysfs import read_infiniband_class
from gpupool.domain.inventory import Source

CHRYSALIS = "ibv_devinfo-v_chrysalis_cx6-ib_cx5-roce_scorpio.txt"
ROCE_IBSTAT = "ibstat_h100_roce_8x-cx7-400g_4x-cx6dx-100g_gpud.txt"
IB_IBSTAT = "ibstat_h100_8x-cx7-ndr-ib_1x-bf3-bond-eth_gpud.txt"
PANIC_IBSTAT = "ibstat_a100-azure_8x-hdr-ib_ibpanic-partial_gpud.txt"


def test_chrysalis_one_infiniband_and_two_roce_devices(captures: Path) -> None:
    devices = parse_ibv_devinfo((captures / CHRYSALIS).read_text())
    assert [(d.name, d.hca_type, d.fw_ver) for d in devices] == [
        ("mlx5_0", "MT4123", "20.29.2002"),
        ("mlx5_1", "MT4119", "16.27.2008"),
        ("mlx5_2", "MT4119", "16.27.2008"),
    ]
    (ib,), (roce, _) = devices[0].ports, [d.ports[0] for d in devices[1:]]
    # HDR: 4 lanes at 50 Gb/s; the CX-5s: 4 lanes at 25 Gb/s
    assert (ib.port, ib.link_layer, ib.rate_gbps, ib.state, ib.phys_state) == (
        1,
        "InfiniBand",
        200.0,
        "ACTIVE",
        "LinkUp",
    )
    assert (roce.link_layer, roce.rate_gbps) == ("Ethernet", 100.0)
    assert devices[0].board_id == "MT_0000000223" and devices[0].source is Source.RDMA_TOOLS


def test_chrysalis_gid_tables(captures: Path) -> None:
    devices = parse_ibv_devinfo((captures / CHRYSALIS).read_text())
    (ib_gid,) = devices[0].ports[0].gids
    assert (ib_gid.index, ib_gid.gid, ib_gid.type) == (
        0,
        "fe80:0000:0000:0000:0c42:a103:0065:d6b6",
        None,
    )
    roce = devices[2].ports[0].gids
    assert [(g.index, g.type) for g in roce] == [
        (0, "RoCE v1"),
        (1, "RoCE v2"),
        (2, "RoCE v1"),
        (3, "RoCE v2"),
    ]
    assert roce[3].gid == "::ffff:10.60.32.11"


def test_roce_ibstat_twelve_ethernet_devices(captures: Path) -> None:
    devices = parse_ibstat((captures / ROCE_IBSTAT).read_text())
    assert len(devices) == 12
    assert devices[2].name == "mlx5_10"  # ibstat's own order is kept
    rates = {d.name: d.ports[0].rate_gbps for d in devices}
    assert sorted(n for n, rate in rates.items() if rate == 100) == [
        "mlx5_1",
        "mlx5_2",
        "mlx5_7",
        "mlx5_8",
    ]
    ports = [d.ports[0] for d in devices]
    assert {(p.port, p.link_layer, p.state, p.phys_state) for p in ports} == {
        (1, "Ethernet", "ACTIVE", "LinkUp")
    }
    assert all(p.gids == [] for p in ports)
    assert devices[0].hca_type == "MT4129" and devices[1].fw_ver == "22.39.1002"


def test_infiniband_ibstat_agrees_with_the_sysfs_tree_of_the_same_machine(
    captures: Path,
) -> None:
    from_ibstat = {d.name: d for d in parse_ibstat((captures / IB_IBSTAT).read_text())}
    from_sysfs = read_infiniband_class(captures / "sysfs_class_infiniband_h100_gpud")
    assert set(from_ibstat) == {d.name for d in from_sysfs}
    for device in from_sysfs:
        ours, theirs = from_ibstat[device.name].ports[0], device.ports[0]
        assert (ours.link_layer, ours.state) == (theirs.link_layer, theirs.state)
        assert device.hca_type == from_ibstat[device.name].hca_type


def test_ibstat_that_panicked_midway_keeps_what_it_printed(captures: Path) -> None:
    devices = parse_ibstat((captures / PANIC_IBSTAT).read_text())
    assert len(devices) == 8
    assert {d.ports[0].link_layer for d in devices} == {"InfiniBand"}


def test_empty_or_foreign_text_gives_no_devices() -> None:
    assert parse_ibv_devinfo("") == []
    assert parse_ibstat("ibstat: command not found") == []
    assert parse_ibv_devinfo("No IB devices found") == []
