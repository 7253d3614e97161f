"""The NVML path, driven by a small stand-in for ``pynvml`` (no GPU exists on this machine).

The stand-in raises the real ``pynvml`` error classes, so the error handling is the real one.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from gpupool.discovery.nvml import cuda_version_text, discover_nvml, mig_profile
from gpupool.domain.inventory import LinkKind, Source
from gpupool.domain.units import GiB, MiB


class FakeNvml:
    """Just enough of pynvml: handles are dicts describing one GPU or MIG device."""

    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = 1
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus: list[dict], init_error: type[Exception] | None = None) -> None:
        self.gpus, self.init_error, self.shut_down = gpus, init_error, False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"535.161.08"  # older pynvml hands back bytes

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: dict) -> str:
        return handle["uuid"]

    def nvmlDeviceGetName(self, handle: dict) -> str:
        return handle["name"]

    def nvmlDeviceGetMemoryInfo(self, handle: dict) -> SimpleNamespace:
        return SimpleNamespace(total=handle["total"], used=handle.get("used", 0))

    def nvmlDeviceGetPciInfo(self, handle: dict) -> SimpleNamespace:
        return SimpleNamespace(busId=handle["bus"].encode())

    def nvmlDeviceGetUtilizationRates(self, handle: dict) -> SimpleNamespace:
        if "util" not in handle:
            raise pynvml.NVMLError_NotSupported()
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetMigMode(self, handle: dict) -> list[int]:
        if "migs" not in handle:
            raise pynvml.NVMLError_NotSupported()
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: dict) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: dict, index: int) -> dict:
        if index >= len(handle["migs"]):
            raise pynvml.NVMLError_NotFound()
        return handle["migs"][index]

    def nvmlDeviceGetGpuInstanceId(self, handle: dict) -> int:
        return handle["gi"]

    def nvmlDeviceGetComputeInstanceId(self, handle: dict) -> int:
        return handle["ci"]

    def nvmlDeviceGetAttributes(self, handle: dict) -> SimpleNamespace:
        return SimpleNamespace(multiprocessorCount=handle["sms"])

    def nvmlDeviceGetNvLinkState(self, handle: dict, link: int) -> int:
        if link >= len(handle.get("links", [])):
            raise pynvml.NVMLError_InvalidArgument()
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: dict, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=handle["links"][link][0])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: dict, link: int) -> int:
        return handle["links"][link][1]


def _mig(gi: int, profile: str, memory_mib: int, sms: int) -> dict:
    return {
        "uuid": f"MIG-{gi:08x}-0000-0000-0000-000000000000",
        "name": f"NVIDIA A100-SXM4-80GB MIG {profile}",
        "total": memory_mib * MiB,
        "gi": gi,
        "ci": 0,
        "sms": sms,
    }


def _pair() -> list[dict]:
    """Two A100s joined by 12 NVLinks; GPU 1 in MIG mode with two instances."""
    bus0, bus1 = "00000000:07:00.0", "00000000:0F:00.0"
    return [
        {
            "uuid": "GPU-aaaa",
            "name": "NVIDIA A100-SXM4-80GB",
            "total": 80 * GiB,
            "used": 1 * GiB,
            "bus": bus0,
            "util": 37,
            "links": [(bus1, 0)] * 12,
        },
        {
            "uuid": "GPU-bbbb",
            "name": "NVIDIA A100-SXM4-80GB",
            "total": 80 * GiB,
            "bus": bus1,
            "links": [("0000:07:00.0", 0)] * 12,  # the short form NVML also uses
            "migs": [_mig(1, "3g.40gb", 40192, 42), _mig(5, "1g.10gb", 9728, 14)],
        },
    ]


def _sysfs(tmp_path: Path) -> Path:
    node = tmp_path / "bus/pci/devices/0000:07:00.0"
    node.mkdir(parents=True)
    (node / "numa_node").write_text("1\n")
    other = tmp_path / "bus/pci/devices/0000:0f:00.0"
    other.mkdir(parents=True)
    (other / "numa_node").write_text("-1\n")
    return tmp_path


def test_gpus_versions_and_sources(tmp_path: Path) -> None:
    nvml = FakeNvml(_pair())
    report = discover_nvml(_sysfs(tmp_path), nvml)
    assert nvml.shut_down
    assert (report.driver_version, report.cuda_version) == ("535.161.08", "12.2")
    first, second = report.gpus
    assert (first.index, first.uuid, first.memory_bytes) == (0, "GPU-aaaa", 80 * GiB)
    assert (first.memory_used_bytes, first.utilization_percent) == (GiB, 37.0)
    assert first.pci_bus_id == "00000000:07:00.0"
    assert first.numa_node == 1
    assert first.sources["numa_node"] is Source.SYSFS
    assert first.sources["uuid"] is Source.NVML
    assert second.numa_node is None  # numa_node -1
    assert second.utilization_percent is None and "utilization_percent" not in second.sources


def test_mig_devices(tmp_path: Path) -> None:
    first, second = discover_nvml(_sysfs(tmp_path), FakeNvml(_pair())).gpus
    assert (first.mig_enabled, first.mig_devices) == (False, [])
    assert second.mig_enabled
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in second.mig_devices] == [
        (1, 0),
        (5, 0),
    ]
    assert [m.profile for m in second.mig_devices] == ["3g.40gb", "1g.10gb"]
    assert [m.memory_bytes for m in second.mig_devices] == [40192 * MiB, 9728 * MiB]
    assert [m.sm_count for m in second.mig_devices] == [42, 14]


def test_nvlinks_are_counted_per_pair(tmp_path: Path) -> None:
    (link,) = discover_nvml(_sysfs(tmp_path), FakeNvml(_pair())).links
    assert (link.a, link.b, link.kind, link.nvlinks, link.source) == (
        0,
        1,
        LinkKind.NVLINK,
        12,
        Source.NVML,
    )


def test_nvswitch_gpus_form_a_full_mesh(tmp_path: Path) -> None:
    switch = ("00000000:C4:00.0", 2)
    gpus = [
        {"uuid": f"GPU-{i}", "name": "H100", "total": 80 * GiB, "bus": f"0000:{i + 1:02x}:00.0"}
        | {"links": [switch] * 18}
        for i in range(4)
    ]
    links = discover_nvml(tmp_path, FakeNvml(gpus)).links
    assert [(link.a, link.b) for link in links] == list(combinations(range(4), 2))
    assert {link.nvlinks for link in links} == {18}


@pytest.mark.parametrize(
    "error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded]
)
def test_missing_library_or_driver_gives_none(tmp_path: Path, error) -> None:
    assert discover_nvml(tmp_path, FakeNvml([], init_error=error)) is None


def test_failure_while_listing_gives_none(tmp_path: Path) -> None:
    nvml = FakeNvml([])

    def count() -> int:
        raise pynvml.NVMLError_Unknown()

    nvml.nvmlDeviceGetCount = count
    assert discover_nvml(tmp_path, nvml) is None
    assert nvml.shut_down


def test_gpu_without_uuid_is_left_out(tmp_path: Path) -> None:
    gpus = _pair()
    nvml = FakeNvml(gpus)
    real = nvml.nvmlDeviceGetUUID

    def uuid(handle: dict) -> str:
        if handle is gpus[0]:
            raise pynvml.NVMLError_GpuIsLost()
        return real(handle)

    nvml.nvmlDeviceGetUUID = uuid
    report = discover_nvml(tmp_path, nvml)
    assert [gpu.uuid for gpu in report.gpus] == ["GPU-bbbb"]
    assert report.warnings == ["NVML gave no UUID or memory for GPU 0; left out"]
    assert report.links == []


def test_real_pynvml_on_this_machine(tmp_path: Path) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        assert discover_nvml(tmp_path) is None  # no driver here: None, not an exception
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")


def test_helpers() -> None:
    assert cuda_version_text(12020) == "12.2"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(None) is None
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("NVIDIA H100 80GB HBM3") is None
