"""The shape every GPU probe (NVML, nvidia-smi, declared) hands back to ``discover_node``."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpupool.domain.inventory import GpuDevice, GpuLink, Source


@dataclass
class GpuReport:
    """GPUs, the links between them and the driver facts found by one probe."""

    source: Source
    gpus: list[GpuDevice] = field(default_factory=list)
    links: list[GpuLink] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    warnings: list[str] = field(default_factory=list)


def present_fields(values: dict[str, object], source: Source) -> dict[str, Source]:
    """Map every field that holds a value (not None) to ``source``."""
    return {name: source for name, value in values.items() if value is not None}
