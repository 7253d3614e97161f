"""``--query-gpu`` CSV and ``nvidia-smi -L`` over the real captures."""

from __future__ import annotations

from pathlib import Path

from gpupool.discovery.nvidia_smi import (
    apply_gpu_list,
    devices_from_query_rows,
    parse_gpu_list,
    parse_query_gpu_csv,
)
from gpupool.discovery.report import GpuReport
from gpupool.domain.inventory import GpuDevice, MigDevice, Source
from gpupool.domain.units import GiB, MiB

TEMPURA = "nvsmi-query-gpu_8x-quadro-rtx6000_tempura.csv"
H100 = "nvsmi-capture_h100-80gb-hbm3_mig_590.48.01_nvidia_gpu_exporter.txt"
RTX4080 = "nvsmi-capture_geforce-rtx-4080-super_595.71.05_nvidia_gpu_exporter.txt"
QUERY = "nvidia-smi --query-gpu="


def test_tempura_csv_rows(captures: Path) -> None:
    rows = parse_query_gpu_csv((captures / TEMPURA).read_text())
    assert len(rows) == 8
    assert rows[0] == {
        "index": "0",
        "name": "Quadro RTX 6000",
        "pci.bus_id": "00000000:1A:00.0",
        "pcie.link.gen.current": "1",
        "pcie.link.gen.max": "3",
        "pcie.link.width.current": "16",
        "pcie.link.width.max": "16",
    }
    assert [row["pci.bus_id"][-7:] for row in rows][-1] == "24:00.0"


def test_tempura_csv_has_no_uuid_so_no_devices(captures: Path) -> None:
    report = devices_from_query_rows(parse_query_gpu_csv((captures / TEMPURA).read_text()))
    assert report.gpus == []
    assert report.warnings == ["the --query-gpu CSV lacks the uuid or memory.total column"]


def test_h100_mig_exporter_csv(captures: Path, section) -> None:
    rows = parse_query_gpu_csv(section(captures / H100, QUERY))
    (row,) = rows
    assert len(row) == 212
    assert row["memory.total"] == "81559 MiB"  # header "memory.total [MiB]"
    assert row["utilization.gpu"] is None  # "[N/A]"
    report = devices_from_query_rows(rows)
    (gpu,) = report.gpus
    assert report.driver_version == "590.48.01"
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_bytes == 81559 * MiB
    assert gpu.memory_used_bytes == 59 * MiB
    assert gpu.pci_bus_id == "00000000:00:09.0"
    assert gpu.mig_enabled is True
    assert gpu.sources["memory_bytes"] is Source.NVIDIA_SMI


def test_rtx4080_exporter_csv(captures: Path, section) -> None:
    (gpu,) = devices_from_query_rows(parse_query_gpu_csv(section(captures / RTX4080, QUERY))).gpus
    assert gpu.name == "NVIDIA GeForce RTX 4080 SUPER"
    assert gpu.memory_bytes == 16376 * MiB
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.mig_enabled is False
    assert gpu.utilization_percent == 0.0


def test_nounits_csv_takes_the_unit_from_the_header() -> None:
    text = "index, uuid, memory.total [MiB], utilization.gpu [%]\n0, GPU-x, 1024, 7\n"
    (gpu,) = devices_from_query_rows(parse_query_gpu_csv(text)).gpus
    assert (gpu.memory_bytes, gpu.utilization_percent) == (1 * GiB, 7.0)


def test_gpu_list_with_mig_lines(captures: Path, section) -> None:
    (gpu,) = parse_gpu_list(section(captures / H100, "nvidia-smi -L"))
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert [mig.profile for mig in gpu.migs] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [mig.device for mig in gpu.migs] == [0, 1, 2, 3]
    assert gpu.migs[3].uuid == "MIG-00000003-0000-0000-0000-000000000003"


def test_gpu_list_without_mig(captures: Path, section) -> None:
    (gpu,) = parse_gpu_list(section(captures / RTX4080, "nvidia-smi -L"))
    assert gpu.name == "NVIDIA GeForce RTX 4080 SUPER"
    assert gpu.migs == []


def test_apply_gpu_list_replaces_legacy_mig_uuids(captures: Path, section) -> None:
    listed = parse_gpu_list(section(captures / H100, "nvidia-smi -L"))
    uuid = listed[0].uuid
    migs = [
        MigDevice(uuid=f"MIG-{uuid}/{gi}/0", gpu_instance_id=gi, memory_bytes=GiB)
        for gi in (1, 5, 13, 14)
    ]
    gpu = GpuDevice(index=0, uuid=uuid, name="H100", memory_bytes=80 * GiB, mig_devices=migs)
    report = GpuReport(source=Source.NVIDIA_SMI, gpus=[gpu])
    apply_gpu_list(report, listed)
    assert [mig.profile for mig in gpu.mig_devices][:2] == ["3g.40gb", "2g.20gb"]
    assert gpu.mig_devices[0].uuid == "MIG-00000000-0000-0000-0000-000000000000"
    assert report.warnings == []
    apply_gpu_list(report, [])  # nothing listed: nothing changes
    assert gpu.mig_devices[1].uuid == "MIG-00000001-0000-0000-0000-000000000001"
