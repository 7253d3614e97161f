"""Node discovery: what GPUs, links, NICs, RDMA devices, CPUs and memory this node has.

Order of trust for GPUs: NVML, then the ``nvidia-smi`` tool, then the declared inventory
(``GPUPOOL_DECLARED_GPUS``). Every value records where it came from in ``sources``.
"""

from __future__ import annotations

from typing import Any

from gpupool.discovery import host
from gpupool.discovery.declared import (
    DeclaredSettingError,
    memory_notes,
    parse_declared_gpus,
    parse_declared_links,
)
from gpupool.discovery.nvidia_smi import apply_nic_affinity, discover_nvidia_smi
from gpupool.discovery.nvml import discover_nvml
from gpupool.discovery.report import GpuReport
from gpupool.discovery.sysfs import read_nics, read_rdma_devices
from gpupool.domain.inventory import NodeInventory, Source
from gpupool.domain.units import parse_bytes
from gpupool.settings import Settings

__all__ = [
    "DeclaredSettingError",
    "GpuReport",
    "check_declared",
    "discover_gpus",
    "discover_node",
    "host_facts",
]


def discover_node(settings: Settings, *, nvml_module: Any | None = None) -> NodeInventory:
    """Describe this node. ``nvml_module`` replaces ``pynvml`` (tests); None imports it.

    Never raises for missing hardware, drivers or sysfs files; raises DeclaredSettingError
    (a ValueError) only for malformed declared settings (``declared_gpus``,
    ``declared_links``, ``declared_memory``, ``declared_cpus``).
    """
    facts, sources = host_facts(settings)
    name = settings.node_name or facts["hostname"] or "localhost"
    sources["name"] = Source.DECLARED if settings.node_name else sources.get("hostname")
    report = discover_gpus(settings, name, nvml_module=nvml_module)
    nics, rdma = read_nics(settings.sysfs_root), read_rdma_devices(settings.sysfs_root)
    sources.update(_report_sources(report))
    return NodeInventory(
        name=name,
        **facts,
        gpus=report.gpus,
        links=report.links,
        nics=nics,
        rdma=rdma,
        driver_version=report.driver_version,
        cuda_version=report.cuda_version,
        sources={key: value for key, value in sources.items() if value is not None},
        warnings=report.warnings,
    )


def discover_gpus(settings: Settings, node: str, *, nvml_module: Any | None = None) -> GpuReport:
    """NVML first, then ``nvidia-smi``, then the declared inventory (possibly no GPUs)."""
    if settings.use_nvml:
        report = discover_nvml(settings.sysfs_root, nvml_module)
        if report is not None and report.gpus:
            apply_nic_affinity(report)
            return report
    report = discover_nvidia_smi(settings.sysfs_root)
    if report is not None and report.gpus:
        return report
    return declared_report(settings, node)


def declared_report(settings: Settings, node: str) -> GpuReport:
    """The declared GPUs (``settings.declared_gpus``) and the links between them
    (``settings.declared_links``), or no GPUs when none are declared."""
    report = GpuReport(source=Source.DECLARED)
    if settings.declared_gpus and settings.declared_gpus.strip():
        report.gpus = parse_declared_gpus(settings.declared_gpus, node)
        report.links = parse_declared_links(settings.declared_links or "", len(report.gpus))
        report.warnings.append(
            "no NVIDIA driver answered (NVML, nvidia-smi); the GPUs are the declared inventory"
        )
        report.warnings += memory_notes(settings.declared_gpus)
    return report


def check_declared(settings: Settings) -> None:
    """Raise DeclaredSettingError for a malformed declared setting, before anything else
    happens: a server must refuse its settings before it creates a database or an admin."""
    declared_report(settings, settings.node_name or "node")
    _cpus(settings)
    _memory(settings)


def host_facts(settings: Settings) -> tuple[dict[str, Any], dict[str, Source | None]]:
    """CPUs, memory, host name and NUMA node count, with the source of each."""
    cpus, cpu_source = _cpus(settings)
    memory, memory_source = _memory(settings)
    hostname, numa = host.hostname(), host.numa_node_count(settings.sysfs_root)
    facts = {"cpus": cpus, "memory_bytes": memory, "hostname": hostname, "numa_nodes": numa}
    sources = {
        "cpus": cpu_source,
        "memory_bytes": memory_source,
        "hostname": Source.PSUTIL if hostname else None,  # the OS; Source has no better member
        "numa_nodes": Source.SYSFS if numa is not None else None,
    }
    return facts, sources


def _cpus(settings: Settings) -> tuple[int, Source]:
    if settings.declared_cpus is None:
        return host.cpu_count(), Source.PSUTIL
    if settings.declared_cpus < 1:
        raise DeclaredSettingError(
            "declared_cpus", f"the declared CPUs must be at least 1, not {settings.declared_cpus}"
        )
    return settings.declared_cpus, Source.DECLARED


def _memory(settings: Settings) -> tuple[int, Source]:
    if not settings.declared_memory:
        return host.memory_bytes(), Source.PSUTIL
    try:
        return parse_bytes(settings.declared_memory), Source.DECLARED
    except ValueError as error:
        raise DeclaredSettingError("declared_memory", f"the declared memory: {error}") from None


def _report_sources(report: GpuReport) -> dict[str, Source | None]:
    found = {
        "gpus": bool(report.gpus),
        "links": bool(report.links),
        "driver_version": report.driver_version is not None,
        "cuda_version": report.cuda_version is not None,
    }
    sources = {key: report.source if present else None for key, present in found.items()}
    sources["nics"] = sources["rdma"] = Source.SYSFS  # read even when the lists are empty
    return sources
