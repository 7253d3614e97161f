"""PCI bus id forms and the NUMA node lookup."""

from __future__ import annotations

from pathlib import Path

from gpupool.discovery.pci import normalize_bus_id, read_numa_node, sysfs_bus_id


def test_forms() -> None:
    assert normalize_bus_id("0000:1a:00.0") == "00000000:1A:00.0"
    assert normalize_bus_id(b"00001580:00:00.0") == "00001580:00:00.0"
    assert normalize_bus_id("not a bus id") is None
    assert normalize_bus_id(None) is None
    assert sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert sysfs_bus_id("0000F8D6:00:00.0") == "f8d6:00:00.0"  # Hyper-V domain, 4 digits


def test_numa_node(tmp_path: Path) -> None:
    device = tmp_path / "bus/pci/devices/2df7:00:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("3\n")
    assert read_numa_node(tmp_path, "00002DF7:00:00.0") == 3
    (device / "numa_node").write_text("-1\n")
    assert read_numa_node(tmp_path, "00002DF7:00:00.0") is None
    assert read_numa_node(tmp_path, "00000000:01:00.0") is None
    assert read_numa_node(tmp_path, None) is None
