"""``nvidia-smi -L``: GPU and MIG device UUIDs, with MIG profile names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpupool.discovery.report import GpuReport

_GPU_LINE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)")
_MIG_LINE = re.compile(
    r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>[^)]+)\)"
)


@dataclass
class ListedMig:
    """One MIG line of ``nvidia-smi -L``."""

    device: int
    profile: str
    uuid: str


@dataclass
class ListedGpu:
    """One GPU line of ``nvidia-smi -L`` with the MIG lines under it."""

    index: int
    name: str
    uuid: str
    migs: list[ListedMig] = field(default_factory=list)


def parse_gpu_list(text: str) -> list[ListedGpu]:
    """Parse ``nvidia-smi -L``: "GPU 0: <name> (UUID: GPU-...)" and indented MIG lines."""
    gpus: list[ListedGpu] = []
    for line in text.splitlines():
        if match := _GPU_LINE.match(line):
            gpus.append(ListedGpu(int(match["index"]), match["name"], match["uuid"].strip()))
        elif (match := _MIG_LINE.match(line)) and gpus:
            mig = ListedMig(int(match["device"]), match["profile"], match["uuid"].strip())
            gpus[-1].migs.append(mig)
    return gpus


def apply_gpu_list(report: GpuReport, listed: list[ListedGpu]) -> None:
    """Give MIG devices their real UUIDs and profiles from ``nvidia-smi -L``."""
    by_uuid = {gpu.uuid: gpu for gpu in listed}
    for gpu in report.gpus:
        entry = by_uuid.get(gpu.uuid)
        if entry is None or not gpu.mig_devices:
            continue
        if len(entry.migs) != len(gpu.mig_devices):
            report.warnings.append(f"GPU {gpu.index}: -L and -q -x list different MIG devices")
            continue
        lines = sorted(entry.migs, key=lambda mig: mig.device)
        for mig, line in zip(gpu.mig_devices, lines, strict=True):
            mig.uuid, mig.profile = line.uuid, line.profile
