"""``nvidia-smi -q -x`` parsing over every real XML capture."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpupool.discovery.nvidia_smi import parse_query_xml
from gpupool.domain.inventory import Source
from gpupool.domain.units import MiB

A100_MIG = "nvsmi-qx_a100-sxm4-80gb_mig_535.54.03_telegraf.xml"
T4 = "nvsmi-qx_tesla-t4_515.105.01_telegraf.xml"
A5000 = "nvsmi-qx_2x-rtx-a5000_590.44.01_telegraf-pr18176.xml"
RTX3080 = "nvsmi-qx_geforce-rtx-3080_595.58.03_telegraf.xml"
K80 = "nvsmi-qx_4x-tesla-k80_azure_430.26_openpai.xml"


def _parse(captures: Path, name: str):
    return parse_query_xml((captures / name).read_text())


def test_every_xml_capture_yields_one_gpu_per_gpu_element(captures: Path) -> None:
    files = sorted(captures.glob("nvsmi-qx_*.xml"))
    assert len(files) == 5
    for path in files:
        root = ET.parse(path).getroot()
        report = parse_query_xml(path.read_text())
        uuids = [element.findtext("uuid").strip() for element in root.findall("gpu")]
        assert [gpu.uuid for gpu in report.gpus] == uuids, path.name
        assert report.driver_version == root.findtext("driver_version").strip()
        assert all(gpu.sources["uuid"] is Source.NVIDIA_SMI for gpu in report.gpus)


def test_a100_mig_file(captures: Path) -> None:
    report = _parse(captures, A100_MIG)
    assert (report.driver_version, report.cuda_version) == ("535.54.03", "12.2")
    assert report.warnings == [
        "nvidia-smi reports 4 attached GPUs but lists 1; only the listed ones are used"
    ]
    (gpu,) = report.gpus
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.memory_bytes == 81920 * MiB
    assert gpu.memory_used_bytes == 50 * MiB
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.utilization_percent is None  # <gpu_util>N/A</gpu_util>
    assert "utilization_percent" not in gpu.sources
    assert gpu.mig_enabled is True


def test_a100_mig_devices(captures: Path) -> None:
    (gpu,) = _parse(captures, A100_MIG).gpus
    migs = gpu.mig_devices
    assert [mig.gpu_instance_id for mig in migs] == [3, 4, 5, 6]
    assert {mig.compute_instance_id for mig in migs} == {0}
    assert {mig.memory_bytes for mig in migs} == {19968 * MiB}
    assert {mig.sm_count for mig in migs} == {14}
    assert migs[0].uuid == "MIG-GPU-513536b6-7d19-9063-b049-1e69664bb298/3/0"
    assert all(mig.profile is None for mig in migs)  # -q -x carries no profile names
    schedulable = [unit.uuid for unit in _inventory_units(gpu)]
    assert schedulable == [mig.uuid for mig in migs]


def _inventory_units(gpu):
    from gpupool.domain.inventory import NodeInventory

    return NodeInventory(name="n", cpus=1, memory_bytes=1, gpus=[gpu]).schedulable_gpus()


def test_tesla_t4(captures: Path) -> None:
    report = _parse(captures, T4)
    (gpu,) = report.gpus
    assert (report.driver_version, report.cuda_version) == ("515.105.01", "11.7")
    assert gpu.name == "Tesla T4"
    assert gpu.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert gpu.memory_bytes == 15360 * MiB
    assert gpu.memory_used_bytes == 1032 * MiB
    assert gpu.pci_bus_id == "00000000:00:1E.0"
    assert gpu.mig_enabled is False  # <current_mig>N/A</current_mig>
    assert gpu.utilization_percent == 0.0
    assert report.warnings == []


def test_two_rtx_a5000(captures: Path) -> None:
    report = _parse(captures, A5000)
    assert (report.driver_version, report.cuda_version) == ("590.44.01", "13.1")
    assert [gpu.index for gpu in report.gpus] == [0, 1]
    assert [gpu.pci_bus_id for gpu in report.gpus] == ["00000000:81:00.0", "00000000:C1:00.0"]
    assert [gpu.uuid[-2:] for gpu in report.gpus] == ["ab", "cd"]
    assert {gpu.memory_bytes for gpu in report.gpus} == {24564 * MiB}
    assert [gpu.memory_used_bytes for gpu in report.gpus] == [22437 * MiB, 17253 * MiB]
    assert report.links == []  # -q -x never reports topology


def test_geforce_3080_with_many_na_fields(captures: Path) -> None:
    (gpu,) = _parse(captures, RTX3080).gpus
    assert gpu.name == "NVIDIA GeForce RTX 3080"
    assert gpu.memory_bytes == 10240 * MiB
    assert gpu.memory_used_bytes == 9184 * MiB
    assert gpu.utilization_percent == 65.0
    assert gpu.pci_bus_id == "00000000:0C:00.0"


def test_k80_out_of_order_minor_numbers_and_pci_domains(captures: Path) -> None:
    report = _parse(captures, K80)
    assert report.cuda_version is None  # <cuda_version>Not Found</cuda_version>
    assert report.driver_version == "430.26"
    assert report.warnings == []
    buses = [gpu.pci_bus_id for gpu in report.gpus]
    assert buses == ["00001580:00:00.0", "00002DF7:00:00.0", "00004968:00:00.0", "0000F8D6:00:00.0"]
    # The index is nvidia-smi's (document/bus order), not the minor number (1, 2, 3, 0).
    root = ET.parse(captures / K80).getroot()
    minors = [int(element.findtext("minor_number")) for element in root.findall("gpu")]
    assert minors == [1, 2, 3, 0]
    assert [gpu.index for gpu in report.gpus] == [0, 1, 2, 3]
    # a job given GPU 3 is given /dev/nvidia0: the device node is the minor number's
    assert [gpu.minor_number for gpu in report.gpus] == [1, 2, 3, 0]
    assert report.gpus[3].uuid == "GPU-3341aba2-f01d-2c1f-7dd4-e389779faec2"
    assert {gpu.memory_bytes for gpu in report.gpus} == {11441 * MiB}
    assert [gpu.utilization_percent for gpu in report.gpus] == [99.0, 99.0, 0.0, 0.0]


def test_rejects_text_that_is_not_the_xml_report() -> None:
    with pytest.raises(ValueError, match="not XML"):
        parse_query_xml("NVIDIA-SMI has failed because it couldn't communicate with the driver")
    with pytest.raises(ValueError, match="nvidia_smi_log"):
        parse_query_xml("<other/>")


def test_gpu_without_uuid_is_left_out_with_a_warning() -> None:
    text = (
        "<nvidia_smi_log><attached_gpus>1</attached_gpus>"
        "<gpu id='00000000:01:00.0'><uuid>N/A</uuid></gpu></nvidia_smi_log>"
    )
    report = parse_query_xml(text)
    assert report.gpus == []
    assert report.warnings == ["GPU 0 in nvidia-smi -q -x has no UUID; left out"]
