"""``discover_node`` on this machine's real /sys (no GPU, no NVML), and through nvidia-smi."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import psutil
import pynvml
import pytest

from gpupool.discovery import DeclaredSettingError, check_declared, discover_node
from gpupool.discovery.nvidia_smi import discover_nvidia_smi, run_nvidia_smi
from gpupool.domain.inventory import LinkKind, Source
from gpupool.domain.units import GiB, MiB
from gpupool.settings import Settings

A5000 = "nvsmi-qx_2x-rtx-a5000_590.44.01_telegraf-pr18176.xml"
DGX_TOPO = "topo-m_dgx-a100_8x-a100-sxm4-40gb_10-nic_525.105.17_oyanghd.txt"


@pytest.fixture()
def no_gpu_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Skip where a driver answers; hide any nvidia-smi from PATH."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))


def _real_nic_names() -> list[str]:
    net = Path("/sys/class/net")
    return sorted(path.name for path in net.iterdir() if path.name != "lo") if net.is_dir() else []


def test_falls_back_to_declared_on_real_sys(no_gpu_machine: None) -> None:
    settings = Settings(declared_gpus="2xA100-SXM4-80GB:80GiB", node_name="worker-1")
    inventory = discover_node(settings)
    assert inventory.name == "worker-1"
    assert [gpu.uuid for gpu in inventory.gpus] == [
        "GPU-declared-worker-1-0",
        "GPU-declared-worker-1-1",
    ]
    assert {gpu.memory_bytes for gpu in inventory.gpus} == {80 * GiB}
    assert inventory.sources["gpus"] is Source.DECLARED
    assert inventory.cpus == psutil.cpu_count(logical=True)
    assert inventory.memory_bytes == psutil.virtual_memory().total
    assert inventory.sources["cpus"] is Source.PSUTIL
    assert inventory.hostname == socket.gethostname()
    assert sorted(nic.name for nic in inventory.nics) == _real_nic_names()
    assert inventory.links == [] and inventory.driver_version is None
    assert any("declared inventory" in warning for warning in inventory.warnings)


def test_real_sys_numa_nodes(no_gpu_machine: None) -> None:
    inventory = discover_node(Settings())
    node_dir = Path("/sys/devices/system/node")
    if node_dir.is_dir():
        expected = len([p for p in node_dir.iterdir() if p.name[4:].isdigit()])
        assert inventory.numa_nodes == expected
        assert inventory.sources["numa_nodes"] is Source.SYSFS
    assert inventory.gpus == []
    assert inventory.name == socket.gethostname()


def test_declared_cpus_and_memory(no_gpu_machine: None) -> None:
    inventory = discover_node(Settings(declared_cpus=64, declared_memory="512GiB"))
    assert (inventory.cpus, inventory.memory_bytes) == (64, 512 * GiB)
    assert inventory.sources["cpus"] is inventory.sources["memory_bytes"] is Source.DECLARED


def test_bad_declared_settings_raise(no_gpu_machine: None) -> None:
    with pytest.raises(DeclaredSettingError, match="declared memory") as memory:
        discover_node(Settings(declared_memory="lots"))
    with pytest.raises(DeclaredSettingError, match="lack a GPU model name") as gpus:
        discover_node(Settings(declared_gpus=":80GiB"))
    with pytest.raises(DeclaredSettingError, match="at least 1") as cpus:
        check_declared(Settings(declared_cpus=0))
    assert (memory.value.setting, gpus.value.setting) == ("declared_memory", "declared_gpus")
    assert cpus.value.setting == "declared_cpus"


def test_a_known_model_declared_without_memory_says_what_was_assumed(
    no_gpu_machine: None,
) -> None:
    inventory = discover_node(Settings(declared_gpus="2xA100"))
    assert {gpu.memory_bytes for gpu in inventory.gpus} == {80 * GiB}
    (note,) = [w for w in inventory.warnings if "taken to have" in w]
    assert "80 GiB" in note and "nvidia.com" in note and "2xA100:40GiB" in note


def test_partial_or_missing_sysfs_never_raises(no_gpu_machine: None, tmp_path: Path) -> None:
    (tmp_path / "sys/class/net/eth9").mkdir(parents=True)  # an interface with no attributes
    (tmp_path / "sys/devices/system").mkdir(parents=True)
    inventory = discover_node(Settings(sysfs_root=tmp_path / "sys", use_nvml=False))
    assert [nic.name for nic in inventory.nics] == ["eth9"]
    assert inventory.nics[0].speed_mbps is None and inventory.nics[0].mtu is None
    assert inventory.numa_nodes is None and inventory.rdma == [] and inventory.gpus == []
    assert discover_node(Settings(sysfs_root=tmp_path / "nothing")).nics == []


def _fake_binary(folder: Path, outputs: dict[str, Path]) -> None:
    """An executable ``nvidia-smi`` that prints real captured output for chosen arguments."""
    cases = "".join(f'  "{args}") exec cat "{path}";;\n' for args, path in outputs.items())
    script = folder / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) exit 6;;\nesac\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_run_nvidia_smi_absent_gives_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_nvidia_smi(["-q", "-x"]) is None


def test_nvidia_smi_path_with_real_xml(
    no_gpu_machine: None, captures: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_binary(tmp_path, {"-q -x": captures / A5000})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin")
    inventory = discover_node(Settings(use_nvml=False, sysfs_root=tmp_path / "sys"))
    assert [gpu.pci_bus_id for gpu in inventory.gpus] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert {gpu.memory_bytes for gpu in inventory.gpus} == {24564 * MiB}
    assert inventory.driver_version == "590.44.01" and inventory.cuda_version == "13.1"
    assert inventory.sources["gpus"] is Source.NVIDIA_SMI
    assert inventory.links == []  # topo -m failed (exit 6): no links, no exception


def test_nvidia_smi_topology_and_numa(captures: Path, tmp_path: Path) -> None:
    """Merge logic only: the XML and the topo file come from different machines."""
    outputs = {("-q", "-x"): captures / A5000, ("topo", "-m"): captures / DGX_TOPO}

    def run(args) -> str | None:
        path = outputs.get(tuple(args))
        return path.read_text() if path else None

    report = discover_nvidia_smi(tmp_path, run)
    (link,) = report.links  # only the pair of GPUs the XML lists
    assert (link.a, link.b, link.nvlinks) == (0, 1, 12)
    assert [gpu.numa_node for gpu in report.gpus] == [3, 3]  # topo NUMA Affinity
    assert report.gpus[0].sources["numa_node"] is Source.NVIDIA_SMI
    assert report.gpus[1].nic_affinity["mlx5_1"] is LinkKind.PXB  # topo's NIC columns
    assert report.gpus[1].sources["nic_affinity"] is Source.NVIDIA_SMI


def test_nvidia_smi_mig_without_gpu_list_warns(captures: Path, tmp_path: Path) -> None:
    xml = (captures / "nvsmi-qx_a100-sxm4-80gb_mig_535.54.03_telegraf.xml").read_text()
    report = discover_nvidia_smi(tmp_path, lambda args: xml if list(args) == ["-q", "-x"] else None)
    assert len(report.gpus[0].mig_devices) == 4
    assert report.warnings[0].startswith("nvidia-smi reports 4 attached GPUs but lists 1")
    assert "legacy MIG-<GPU UUID>/<GI>/<CI>" in report.warnings[1]
