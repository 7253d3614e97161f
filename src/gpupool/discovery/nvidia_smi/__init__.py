"""Fallback GPU discovery through the ``nvidia-smi`` tool.

The parsers are pure functions over the tool's output text:

* ``nvidia-smi -q -x`` -> :func:`parse_query_xml`
* ``nvidia-smi topo -m`` -> :func:`parse_topo_matrix`
* ``nvidia-smi --query-gpu=... --format=csv`` -> :func:`parse_query_gpu_csv`,
  :func:`devices_from_query_rows`
* ``nvidia-smi -L`` -> :func:`parse_gpu_list`

:func:`discover_nvidia_smi` runs the real binary (when it is on PATH) and combines them.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from gpupool.discovery.nvidia_smi.gpu_list import (
    ListedGpu,
    ListedMig,
    apply_gpu_list,
    parse_gpu_list,
)
from gpupool.discovery.nvidia_smi.query_csv import (
    devices_from_query_rows,
    parse_query_gpu_csv,
    query_row_gpu,
)
from gpupool.discovery.nvidia_smi.query_xml import parse_query_xml
from gpupool.discovery.nvidia_smi.topo import (
    TopoMatrix,
    nic_affinity,
    parse_topo_matrix,
    topo_link,
)
from gpupool.discovery.pci import read_numa_node
from gpupool.discovery.report import GpuReport
from gpupool.domain.inventory import Source

__all__ = [
    "ListedGpu",
    "ListedMig",
    "Runner",
    "TopoMatrix",
    "apply_gpu_list",
    "apply_nic_affinity",
    "devices_from_query_rows",
    "discover_nvidia_smi",
    "nic_affinity",
    "parse_gpu_list",
    "parse_query_gpu_csv",
    "parse_query_xml",
    "parse_topo_matrix",
    "query_row_gpu",
    "run_nvidia_smi",
    "topo_link",
]

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str | None]


def run_nvidia_smi(
    args: Sequence[str], *, binary: str = "nvidia-smi", timeout: float = 20.0
) -> str | None:
    """Run ``nvidia-smi <args>`` and return its stdout; None if absent, failing or too slow."""
    path = shutil.which(binary)
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        log.warning("%s %s failed: %s", binary, " ".join(args), error)
        return None
    if done.returncode != 0:
        log.info("%s %s exited %s: %s", binary, " ".join(args), done.returncode, done.stderr)
        return None
    return done.stdout


def discover_nvidia_smi(sysfs_root: Path, run: Runner = run_nvidia_smi) -> GpuReport | None:
    """GPUs from ``nvidia-smi -q -x``, MIG UUIDs from ``-L``, links from ``topo -m``.

    None when the binary is absent or its XML cannot be read.
    """
    output = run(["-q", "-x"])
    try:
        report = parse_query_xml(output) if output else None
    except ValueError as error:
        log.warning("%s", error)
        return None
    if report is None or not report.gpus:
        return report
    _apply_list(report, run(["-L"]))
    _apply_numa(report, sysfs_root)
    _apply_topology(report, run(["topo", "-m"]))
    return report


def _apply_list(report: GpuReport, output: str | None) -> None:
    apply_gpu_list(report, parse_gpu_list(output or ""))
    legacy = [g.index for g in report.gpus if any(m.profile is None for m in g.mig_devices)]
    if legacy:
        report.warnings.append(
            f"MIG devices of GPU(s) {legacy} have no profile and legacy MIG-<GPU UUID>/<GI>/<CI> "
            "UUIDs: nvidia-smi -L did not list them"
        )


def _apply_numa(report: GpuReport, sysfs_root: Path) -> None:
    for gpu in report.gpus:
        gpu.numa_node = read_numa_node(sysfs_root, gpu.pci_bus_id)
        if gpu.numa_node is not None:
            gpu.sources["numa_node"] = Source.SYSFS


def _apply_topology(report: GpuReport, output: str | None) -> None:
    if not output:
        return
    topo = parse_topo_matrix(output)
    known = {gpu.index for gpu in report.gpus}
    report.links = [link for link in topo.links if link.a in known and link.b in known]
    report.warnings.extend(topo.warnings)
    for gpu in report.gpus:
        if gpu.numa_node is None and topo.numa_affinity.get(gpu.index) is not None:
            gpu.numa_node = topo.numa_affinity[gpu.index]
            gpu.sources["numa_node"] = Source.NVIDIA_SMI
    _set_nic_affinity(report, topo)


def apply_nic_affinity(report: GpuReport, run: Runner = run_nvidia_smi) -> None:
    """Add each GPU's NIC affinity from ``nvidia-smi topo -m`` to a report made another way
    (NVML has no GPU-to-NIC topology); nothing when the tool is absent or fails."""
    output = run(["topo", "-m"]) if report.gpus else None
    if output:
        _set_nic_affinity(report, parse_topo_matrix(output))


def _set_nic_affinity(report: GpuReport, topo: TopoMatrix) -> None:
    affinity = nic_affinity(topo)
    for gpu in report.gpus:
        if affinity.get(gpu.index):
            gpu.nic_affinity = affinity[gpu.index]
            gpu.sources["nic_affinity"] = Source.NVIDIA_SMI
