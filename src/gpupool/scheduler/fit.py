"""Whether a demand fits a GPU or a node: the predicates placement and reasons both use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler.capacity import CPU_EPSILON, GpuState, NodeState
from gpupool.scheduler.types import SHARE_EPSILON, model_matches


@dataclass(frozen=True, slots=True)
class Demand:
    """A request as plain numbers. Equal demands fit (or fail) the same way."""

    gpus: float  # 0 when none
    gpu_memory: int | None
    cpus: float
    memory: int  # host memory
    whole: int = field(init=False, compare=False)  # whole GPUs; 0 for none or a fraction
    fractional: bool = field(init=False, compare=False)  # a share of one GPU
    uses_gpus: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        shares = 0 < self.gpus < 1 or (self.gpus == 0 and bool(self.gpu_memory))
        object.__setattr__(self, "whole", int(self.gpus) if self.gpus >= 1 else 0)
        object.__setattr__(self, "fractional", shares)
        object.__setattr__(self, "uses_gpus", self.gpus > 0 or bool(self.gpu_memory))


def demand_of(request: ResourceRequest) -> Demand:
    return Demand(
        gpus=request.gpus or 0.0,
        gpu_memory=request.gpu_memory_bytes,
        cpus=request.cpus,
        memory=request.memory_bytes or 0,
    )


class DemandCache:
    """One ``Demand`` per request shape: most pending jobs share a few shapes."""

    def __init__(self) -> None:
        self._demands: dict[tuple[object, ...], Demand] = {}

    def of(self, request: ResourceRequest) -> Demand:
        key = (request.gpus, request.gpu_memory_bytes, request.cpus, request.memory_bytes)
        demand = self._demands.get(key)
        if demand is None:
            demand = self._demands[key] = demand_of(request)
        return demand


class Where:
    """Where the tasks of one job may go: GPUs of the allowed models, on allowed nodes.

    ``node_ok`` (optional) vetoes a node for a given demand, e.g. one whose free GPUs are
    reserved for a blocked job that came first.
    """

    __slots__ = ("_models", "node_ok", "types")

    def __init__(
        self,
        types: tuple[str, ...] = (),
        node_ok: Callable[[NodeState, Demand], bool] | None = None,
    ) -> None:
        self.types = types
        self.node_ok = node_ok
        self._models: dict[str, bool] = {}

    @property
    def restricted(self) -> bool:
        return bool(self.types) or self.node_ok is not None

    def gpu_ok(self, gpu: GpuState) -> bool:
        return not self.types or self.model_ok(gpu.model)

    def model_ok(self, model: str) -> bool:
        found = self._models.get(model)
        if found is None:
            found = self._models[model] = model_matches(self.types, model)
        return found

    def node_allowed(self, node: NodeState, demand: Demand) -> bool:
        if self.types and not any(self.model_ok(model) for model in node.models):
            return False
        return self.node_ok is None or self.node_ok(node, demand)


def cpus_fit(free_cpus: float, cpus: float) -> bool:
    return free_cpus >= cpus - CPU_EPSILON


def host_fits(node: NodeState, demand: Demand) -> bool:
    return node.cpus >= demand.cpus - CPU_EPSILON and node.memory_bytes >= demand.memory


def fraction_demand(demand: Demand, gpu: GpuState) -> tuple[float, int]:
    """The share and memory a fractional (or GPU-memory-only) demand takes on ``gpu``."""
    if demand.gpus > 0:
        if demand.gpu_memory is not None:
            return demand.gpus, demand.gpu_memory
        return demand.gpus, int(demand.gpus * gpu.memory_bytes)
    memory = demand.gpu_memory or 0
    if gpu.memory_bytes <= 0:
        return 1.0, memory
    return min(1.0, memory / gpu.memory_bytes), memory


def least_fraction_share(demand: Demand, max_gpu_memory: int) -> float:
    """A lower bound of the share ``demand`` takes on any GPU (for index look-ups)."""
    if demand.gpus > 0:
        return demand.gpus
    if max_gpu_memory <= 0:
        return 1.0
    return min(1.0, (demand.gpu_memory or 0) / max_gpu_memory)


def fraction_fits(gpu: GpuState, share: float, memory: int) -> bool:
    """A share fits a GPU not held whole with room for both the share and the memory."""
    return (
        not gpu.whole
        and gpu.used_share + share <= 1.0 + SHARE_EPSILON
        and gpu.used_memory + memory <= gpu.memory_bytes
    )


def share_fits(gpu: GpuState, share: float) -> bool:
    return not gpu.whole and gpu.used_share + share <= 1.0 + SHARE_EPSILON


def whole_gpus_on(node: NodeState, demand: Demand, where: Where | None = None) -> list[GpuState]:
    """The free GPUs of ``node`` a whole-GPU demand may take (``where``: None, anywhere), in
    index order."""
    least = demand.gpu_memory
    anywhere = where is None or not where.types
    if least is None and anywhere:
        return [gpu for gpu in node.gpus if gpu.free]
    least = least or 0
    return [
        gpu
        for gpu in node.gpus
        if gpu.free and gpu.memory_bytes >= least and (anywhere or where.gpu_ok(gpu))
    ]


def fits_free(node: NodeState, demand: Demand, where: Where) -> bool:
    """Whether ``demand`` fits what ``node`` has free now, on GPUs ``where`` allows (its
    node veto aside): preemption asks it of a node with some victims removed."""
    if not host_fits(node, demand):
        return False
    if demand.whole:
        return node.free_count >= demand.whole and (
            len(whole_gpus_on(node, demand, where)) >= demand.whole
        )
    if demand.fractional:
        return any(
            where.gpu_ok(gpu) and fraction_fits(gpu, *fraction_demand(demand, gpu))
            for gpu in node.gpus
        )
    return True
