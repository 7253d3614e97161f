"""``nvidia-smi topo -m``: the GPU connection matrix, CPU/NUMA affinity and NIC legend."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpupool.discovery.nvidia_smi.values import clean, to_int
from gpupool.domain.inventory import GpuLink, LinkKind, Source

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NVLINK_CODE = re.compile(r"^NV(\d+)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")
_LEGACY_CODES = {"SOC": LinkKind.SYS}


@dataclass
class TopoMatrix:
    """What ``nvidia-smi topo -m`` says about the GPUs; NIC rows are skipped, NIC cells kept raw."""

    links: list[GpuLink] = field(default_factory=list)
    numa_affinity: dict[int, int | None] = field(default_factory=dict)
    cpu_affinity: dict[int, str | None] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"
    gpu_nics: dict[int, dict[str, str]] = field(default_factory=dict)  # 0 -> {"NIC0": "PXB"}
    warnings: list[str] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [cell.strip() for cell in line.rstrip("\n").split("\t")]
    return re.split(r"\s{2,}", line.strip())


def _header(lines: list[str]) -> int | None:
    return next((i for i, line in enumerate(lines) if "GPU0" in _cells(line)), None)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (tabs or spaces, ANSI escapes, varying column sets)."""
    lines = _ANSI.sub("", text).splitlines()
    start = _header(lines)
    if start is None:
        return TopoMatrix(warnings=["nvidia-smi topo -m output has no GPU0 column"])
    header = [cell for cell in _cells(lines[start]) if cell]
    topo = TopoMatrix(nic_names=_nic_legend(lines))
    for line in lines[start + 1 :]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        _topo_row(topo, header, _cells(line))
    return topo


def _nic_legend(lines: list[str]) -> dict[str, str]:
    matches = (_NIC_LEGEND.match(line) for line in lines)
    return {match.group(1): match.group(2) for match in matches if match}


def _device_count(header: list[str]) -> int:
    extra = (i for i, cell in enumerate(header) if "Affinity" in cell or "NUMA" in cell)
    return next(extra, len(header))


def _topo_row(topo: TopoMatrix, header: list[str], cells: list[str]) -> None:
    label = _GPU_LABEL.match(cells[0]) if cells else None
    if label is None:  # a NIC row, or something else that is no GPU
        return
    a, devices = int(label.group(1)), _device_count(header)
    for column, code in zip(header[:devices], cells[1 : devices + 1], strict=False):
        peer = _GPU_LABEL.match(column)
        if peer is None:
            topo.gpu_nics.setdefault(a, {})[column] = code
        elif int(peer.group(1)) > a:
            _add_link(topo, a, int(peer.group(1)), code)
    extras = dict(zip(header[devices:], [c for c in cells[devices + 1 :] if c], strict=False))
    topo.cpu_affinity[a] = clean(extras.get("CPU Affinity"))
    topo.numa_affinity[a] = to_int(extras.get("NUMA Affinity"))


def _add_link(topo: TopoMatrix, a: int, b: int, code: str) -> None:
    link = topo_link(a, b, code)
    if link is None:
        topo.warnings.append(f"topo -m: unknown connection '{code}' between GPU{a} and GPU{b}")
    else:
        topo.links.append(link)


def nic_affinity(topo: TopoMatrix) -> dict[int, dict[str, LinkKind]]:
    """GPU index -> {RDMA device name: how the GPU reaches it}, from the NIC columns and the
    NIC legend ("NIC0: mlx5_0"); a column the legend does not name keeps its label."""
    affinity: dict[int, dict[str, LinkKind]] = {}
    for gpu, cells in topo.gpu_nics.items():
        for column, code in cells.items():
            kind = _nic_link_kind(code)
            if kind is not None:
                affinity.setdefault(gpu, {})[topo.nic_names.get(column, column)] = kind
    return affinity


def _nic_link_kind(code: str) -> LinkKind | None:
    kind = _LEGACY_CODES.get(code) or LinkKind.__members__.get(code)
    return None if kind is LinkKind.NVLINK else kind


def topo_link(a: int, b: int, code: str) -> GpuLink | None:
    """Turn a matrix cell ("NV12", "PIX", "SYS"...) into a GpuLink; None for unknown codes."""
    if match := _NVLINK_CODE.match(code):
        count = int(match.group(1))
        return GpuLink(a=a, b=b, kind=LinkKind.NVLINK, nvlinks=count, source=Source.NVIDIA_SMI)
    kind = _LEGACY_CODES.get(code) or LinkKind.__members__.get(code)
    if kind is None or kind is LinkKind.NVLINK:
        return None
    return GpuLink(a=a, b=b, kind=kind, source=Source.NVIDIA_SMI)
