"""Whether a request fits a GPU or a node: the predicates placement and reasons both use."""

from __future__ import annotations

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler.capacity import GpuState, NodeState
from gpupool.scheduler.types import SHARE_EPSILON

CPU_EPSILON = 1e-9

ShapeKey = tuple[float, int | None, float, int]


def shape_key(request: ResourceRequest) -> ShapeKey:
    """What placement depends on: equal keys fit (or fail) the same way."""
    return (gpu_count(request), request.gpu_memory_bytes, request.cpus, host_memory(request))


def gpu_count(request: ResourceRequest) -> float:
    """The GPUs asked for as a number, 0 when none."""
    return request.gpus or 0.0


def host_memory(request: ResourceRequest) -> int:
    return request.memory_bytes or 0


def cpus_fit(free_cpus: float, cpus: float) -> bool:
    return free_cpus >= cpus - CPU_EPSILON


def host_fits(node: NodeState, request: ResourceRequest) -> bool:
    return cpus_fit(node.cpus, request.cpus) and node.memory_bytes >= host_memory(request)


def fraction_demand(request: ResourceRequest, gpu: GpuState) -> tuple[float, int]:
    """The share and memory a fractional (or GPU-memory-only) request takes on ``gpu``."""
    gpus = gpu_count(request)
    if gpus > 0:
        if request.gpu_memory_bytes is not None:
            return gpus, request.gpu_memory_bytes
        return gpus, int(gpus * gpu.memory_bytes)
    memory = request.gpu_memory_bytes or 0
    if gpu.memory_bytes <= 0:
        return 1.0, memory
    return min(1.0, memory / gpu.memory_bytes), memory


def least_fraction_share(request: ResourceRequest, max_gpu_memory: int) -> float:
    """A lower bound of the share ``request`` takes on any GPU (for index look-ups)."""
    if gpu_count(request) > 0:
        return gpu_count(request)
    if max_gpu_memory <= 0:
        return 1.0
    return min(1.0, (request.gpu_memory_bytes or 0) / max_gpu_memory)


def share_fits(gpu: GpuState, share: float) -> bool:
    return not gpu.whole and gpu.used_share + share <= 1.0 + SHARE_EPSILON


def gpu_memory_fits(gpu: GpuState, memory: int) -> bool:
    return not gpu.whole and gpu.used_memory + memory <= gpu.memory_bytes


def whole_fits(gpu: GpuState, request: ResourceRequest) -> bool:
    least = request.gpu_memory_bytes
    return gpu.is_free and (least is None or gpu.memory_bytes >= least)


def whole_gpus_on(node: NodeState, request: ResourceRequest) -> list[GpuState]:
    """The free GPUs of ``node`` a whole-GPU request may take, in index order."""
    return [gpu for gpu in node.gpus if whole_fits(gpu, request)]
