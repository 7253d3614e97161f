"""NICs and RDMA devices from sysfs: the captured H100 infiniband tree and small made trees."""

from __future__ import annotations

from pathlib import Path

from gpupool.discovery.sysfs import (
    parse_port_state,
    parse_rate_gbps,
    read_infiniband_class,
    read_nics,
    read_rdma_devices,
)

IB_TREE = "sysfs_class_infiniband_h100_gpud"
CX7 = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_captured_h100_infiniband_tree(captures: Path) -> None:
    devices = {device.name: device for device in read_infiniband_class(captures / IB_TREE)}
    assert list(devices) == [*CX7, "mlx5_bond_0"]
    for name in CX7:
        device = devices[name]
        assert (device.hca_type, device.fw_ver, device.board_id) == (
            "MT4129",
            "28.41.1000",
            "MT_0000000838",
        )
        (port,) = device.ports
        assert (port.port, port.link_layer, port.rate_gbps) == (1, "InfiniBand", 400.0)
        assert (port.state, port.phys_state) == ("ACTIVE", "LinkUp")


def test_captured_bond_is_ethernet(captures: Path) -> None:
    bond = read_infiniband_class(captures / IB_TREE)[-1]
    assert (bond.name, bond.hca_type, bond.fw_ver) == ("mlx5_bond_0", "MT41692", "32.38.3056")
    (port,) = bond.ports
    assert (port.link_layer, port.rate_gbps, port.state) == ("Ethernet", 200.0, "ACTIVE")


def test_captured_tree_through_a_sysfs_root(captures: Path, tmp_path: Path) -> None:
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "infiniband").symlink_to(captures / IB_TREE)  # read in place
    devices = read_rdma_devices(tmp_path)
    assert [device.name for device in devices][-1] == "mlx5_bond_0"
    assert read_nics(tmp_path) == []  # no class/net in this tree


def test_values_match_the_files(captures: Path) -> None:
    port_dir = captures / IB_TREE / "mlx5_0" / "ports" / "1"
    assert (port_dir / "rate").read_text().strip() == "400 Gb/sec (4X NDR)"
    assert parse_rate_gbps((port_dir / "rate").read_text()) == 400.0
    assert parse_port_state((port_dir / "state").read_text()) == "ACTIVE"
    assert parse_port_state((port_dir / "phys_state").read_text()) == "LinkUp"


def test_rate_and_state_parsing() -> None:
    assert parse_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate_gbps("invalid") is None
    assert parse_rate_gbps(None) is None
    assert parse_port_state("1: DOWN") == "DOWN"
    assert parse_port_state("") is None


def test_nics_from_a_made_tree_with_rdma_mapping(tmp_path: Path) -> None:
    _write(tmp_path / "class/net/lo/mtu", "65536\n")
    _write(tmp_path / "class/net/ibp26s0/speed", "400000\n")
    _write(tmp_path / "class/net/ibp26s0/operstate", "up\n")
    _write(tmp_path / "class/net/ibp26s0/mtu", "4092\n")
    _write(tmp_path / "class/net/eno1/operstate", "down\n")  # no speed file: as if EINVAL
    _write(tmp_path / "class/net/eno2/speed", "-1\n")
    (tmp_path / "class/infiniband/mlx5_0/device/net/ibp26s0").mkdir(parents=True)
    nics = {nic.name: nic for nic in read_nics(tmp_path)}
    assert list(nics) == ["eno1", "eno2", "ibp26s0"]
    assert (nics["ibp26s0"].speed_mbps, nics["ibp26s0"].mtu) == (400000, 4092)
    assert nics["ibp26s0"].rdma_device == "mlx5_0"
    assert (nics["eno1"].speed_mbps, nics["eno1"].operstate) == (None, "down")
    assert nics["eno2"].speed_mbps is None
    assert read_rdma_devices(tmp_path)[0].ports == []


def test_real_sys_nics() -> None:
    root = Path("/sys")
    if not (root / "class" / "net").is_dir():
        return
    nics = read_nics(root)
    names = sorted(path.name for path in (root / "class" / "net").iterdir() if path.name != "lo")
    assert sorted(nic.name for nic in nics) == names
    for nic in nics:
        mtu = (root / "class" / "net" / nic.name / "mtu").read_text().strip()
        assert nic.mtu == int(mtu)


def test_missing_root_gives_nothing(tmp_path: Path) -> None:
    assert read_nics(tmp_path / "absent") == []
    assert read_rdma_devices(tmp_path / "absent") == []


def test_gid_table_and_numa_node_from_a_made_tree(tmp_path: Path) -> None:
    port = tmp_path / "class/infiniband/mlx5_1/ports/1"
    _write(port / "link_layer", "Ethernet\n")
    _write(port / "state", "4: ACTIVE\n")
    _write(port / "gids/0", "fe80:0000:0000:0000:0e42:a1ff:fe2b:07a4\n")
    _write(port / "gids/1", "fe80:0000:0000:0000:0e42:a1ff:fe2b:07a4\n")
    _write(port / "gids/3", "0000:0000:0000:0000:0000:ffff:8cdd:3c0b\n")
    _write(port / "gids/2", "0000:0000:0000:0000:0000:0000:0000:0000\n")  # an empty slot
    _write(port / "gid_attrs/types/0", "IB/RoCE v1\n")
    _write(port / "gid_attrs/types/1", "RoCE v2\n")
    _write(port / "gid_attrs/types/3", "RoCE v2\n")
    _write(port / "gid_attrs/ndevs/3", "ens1f0\n")
    _write(tmp_path / "class/infiniband/mlx5_1/device/numa_node", "1\n")
    _write(tmp_path / "class/infiniband/mlx5_2/device/numa_node", "-1\n")
    first, second = read_rdma_devices(tmp_path)
    assert (first.numa_node, second.numa_node) == (1, None)
    gids = first.ports[0].gids
    assert [(g.index, g.type, g.netdev) for g in gids] == [
        (0, "IB/RoCE v1", None),
        (1, "RoCE v2", None),
        (3, "RoCE v2", "ens1f0"),
    ]
    assert gids[2].gid == "0000:0000:0000:0000:0000:ffff:8cdd:3c0b"


def test_captured_tree_has_no_gids(captures: Path) -> None:
    devices = read_infiniband_class(captures / IB_TREE)
    assert all(port.gids == [] for device in devices for port in device.ports)
    assert {device.numa_node for device in devices} == {None}
