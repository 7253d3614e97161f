"""GPU discovery through NVML (the nvidia-ml-py package, imported as ``pynvml``).

The module is a parameter everywhere, so tests can hand in a small stand-in object.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

from gpupool.discovery.pci import normalize_bus_id, read_numa_node
from gpupool.discovery.report import GpuReport, present_fields
from gpupool.domain.inventory import GpuDevice, GpuLink, LinkKind, MigDevice, Source

log = logging.getLogger(__name__)

_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_NvlinkEnd = tuple[str | None, int | None]  # remote bus id, remote device type


def load_pynvml() -> Any | None:
    """Import nvidia-ml-py's ``pynvml``; None when the package is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def discover_nvml(sysfs_root: Path = Path("/sys"), nvml: Any | None = None) -> GpuReport | None:
    """Read every GPU NVML sees; None when the library, the driver or NVML itself fails."""
    nvml = nvml if nvml is not None else load_pynvml()
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as error:
        log.info("NVML is not available: %s", error)
        return None
    try:
        return collect(nvml, sysfs_root)
    except nvml.NVMLError as error:
        log.warning("NVML failed while listing GPUs: %s", error)
        return None
    finally:
        _shutdown(nvml)


def collect(nvml: Any, sysfs_root: Path) -> GpuReport:
    """Read GPUs, NVLinks and versions from an initialised NVML."""
    report = GpuReport(source=Source.NVML)
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    for index, handle in enumerate(handles):
        gpu = read_gpu(nvml, index, handle, sysfs_root)
        if gpu is None:
            report.warnings.append(f"NVML gave no UUID or memory for GPU {index}; left out")
        else:
            report.gpus.append(gpu)
    bus_ids = {gpu.index: gpu.pci_bus_id for gpu in report.gpus}
    report.links = nvlink_links(nvml, {i: handles[i] for i in bus_ids}, bus_ids)
    report.driver_version = text(call(nvml, "nvmlSystemGetDriverVersion"))
    report.cuda_version = cuda_version_text(call(nvml, "nvmlSystemGetCudaDriverVersion"))
    return report


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as error:
        log.debug("nvmlShutdown failed: %s", error)


def call(nvml: Any, name: str, *args: Any) -> Any:
    """Call ``nvml.<name>(*args)``; None when the function is missing or raises NVMLError."""
    function = getattr(nvml, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def text(value: str | bytes | None) -> str | None:
    """Decode NVML's bytes (older pynvml) or pass a str through; None stays None."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.strip() if value else None


def cuda_version_text(version: int | None) -> str | None:
    """NVML's CUDA driver version 12020 -> "12.2"."""
    if not version:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def mig_profile(device_name: str | None) -> str | None:
    """ "NVIDIA A100-SXM4-80GB MIG 1g.10gb" -> "1g.10gb"; None if the name names no profile."""
    match = _MIG_PROFILE.search(device_name or "")
    return match.group(1) if match else None


def read_gpu(nvml: Any, index: int, handle: Any, sysfs_root: Path) -> GpuDevice | None:
    """Read one physical GPU; None when NVML gives no UUID or memory for it."""
    uuid = text(call(nvml, "nvmlDeviceGetUUID", handle))
    memory = call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if not uuid or memory is None:
        return None
    values = _gpu_values(nvml, handle)
    values.update(index=index, uuid=uuid, memory_bytes=int(memory.total))
    values["memory_used_bytes"] = int(memory.used)
    sources = present_fields(values, Source.NVML)
    numa = read_numa_node(sysfs_root, values["pci_bus_id"])
    sources.update(present_fields({"numa_node": numa}, Source.SYSFS))
    values["name"] = values["name"] or "unknown NVIDIA GPU"
    return GpuDevice(**values, numa_node=numa, sources=sources)


def _gpu_values(nvml: Any, handle: Any) -> dict[str, Any]:
    pci = call(nvml, "nvmlDeviceGetPciInfo", handle)
    rates = call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    mode = call(nvml, "nvmlDeviceGetMigMode", handle)
    enabled = bool(mode) and mode[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    return {
        "name": text(call(nvml, "nvmlDeviceGetName", handle)),
        "pci_bus_id": normalize_bus_id(getattr(pci, "busId", None)),
        "minor_number": call(nvml, "nvmlDeviceGetMinorNumber", handle),
        "utilization_percent": float(rates.gpu) if rates is not None else None,
        "mig_enabled": enabled,
        "mig_devices": mig_devices(nvml, handle) if enabled else [],
    }


def mig_devices(nvml: Any, handle: Any) -> list[MigDevice]:
    """Read the MIG devices of a GPU whose MIG mode is on (empty slots are skipped)."""
    count = call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    slots = (call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i) for i in range(count))
    devices = (read_mig(nvml, mig) for mig in slots if mig is not None)
    return [device for device in devices if device is not None]


def read_mig(nvml: Any, handle: Any) -> MigDevice | None:
    """Read one MIG device handle; None when it has no UUID or memory."""
    uuid = text(call(nvml, "nvmlDeviceGetUUID", handle))
    memory = call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if not uuid or memory is None:
        return None
    attributes = call(nvml, "nvmlDeviceGetAttributes", handle)
    return MigDevice(
        uuid=uuid,
        gpu_instance_id=call(nvml, "nvmlDeviceGetGpuInstanceId", handle),
        compute_instance_id=call(nvml, "nvmlDeviceGetComputeInstanceId", handle),
        profile=mig_profile(text(call(nvml, "nvmlDeviceGetName", handle))),
        memory_bytes=int(memory.total),
        sm_count=getattr(attributes, "multiprocessorCount", None),
    )


def active_nvlinks(nvml: Any, handle: Any) -> list[_NvlinkEnd]:
    """Return (remote bus id, remote device type) for every active NVLink of a GPU."""
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    ends: list[_NvlinkEnd] = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        if call(nvml, "nvmlDeviceGetNvLinkState", handle, link) != enabled:
            continue
        remote = call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        kind = call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        ends.append((normalize_bus_id(getattr(remote, "busId", None)), kind))
    return ends


def nvlink_links(
    nvml: Any, handles: dict[int, Any], bus_ids: dict[int, str | None]
) -> list[GpuLink]:
    """Count active NVLinks between GPU pairs (matched by remote PCI bus id).

    GPUs that reach each other only through NVSwitches get ``min`` of their switch link counts,
    as ``nvidia-smi topo -m`` reports them.
    """
    index_of = {bus: index for index, bus in bus_ids.items() if bus}
    direct: Counter[tuple[int, int]] = Counter()
    switched: Counter[int] = Counter()
    for index, handle in handles.items():
        for remote, kind in active_nvlinks(nvml, handle):
            peer = index_of.get(remote) if remote else None
            if peer is not None and peer > index:
                direct[(index, peer)] += 1
            elif peer is None and kind == _NVLINK_SWITCH:
                switched[index] += 1
    counts = _switch_pairs(switched) | direct
    return [_nvlink(a, b, n) for (a, b), n in sorted(counts.items())]


def _switch_pairs(switched: Counter[int]) -> Counter[tuple[int, int]]:
    gpus = sorted(switched)
    pairs = ((a, b) for a in gpus for b in gpus if a < b)
    return Counter({(a, b): min(switched[a], switched[b]) for a, b in pairs})


def _nvlink(a: int, b: int, count: int) -> GpuLink:
    return GpuLink(a=a, b=b, kind=LinkKind.NVLINK, nvlinks=count, source=Source.NVML)
