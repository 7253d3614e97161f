"""Whether a pool could ever run a job: refused at submit instead of waiting forever.

A task no node could hold is the scheduler's own ``infeasible_reason`` (the API refuses the
same). A gang is also refused when the empty pool cannot hold all its tasks at once, which
``infeasible_reason`` (one task) does not judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain.jobs import ResourceRequest
from gpupool.scheduler import infeasible_reason
from gpupool.scheduler.fit import model_matches
from gpupool.scheduler.types import NodeCapacity


class RefusalCache:
    """Why the given nodes could never run a job (None: they could), once per job shape.

    A task: the scheduler's ``infeasible_reason``. A gang: also whether the empty nodes hold
    all its tasks at once (``infeasible_reason`` judges one task).
    """

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self._nodes = nodes
        self._reasons: dict[tuple[object, ...], str | None] = {}

    def reason(
        self, request: ResourceRequest, gpu_types: tuple[str, ...] = (), tasks: int = 1
    ) -> str | None:
        key = (
            request.gpus,
            request.gpu_memory_bytes,
            request.cpus,
            request.memory_bytes,
            gpu_types,
            tasks,
        )
        if key not in self._reasons:
            reason = infeasible_reason(request, self._nodes, gpu_types)
            if reason is None and tasks > 1:
                reason = gang_reason(request, tasks, self._nodes, gpu_types)
            self._reasons[key] = reason
        return self._reasons[key]


def gang_reason(
    request: ResourceRequest,
    tasks: int,
    nodes: Sequence[NodeCapacity],
    gpu_types: tuple[str, ...] = (),
) -> str | None:
    """Why the empty ``nodes`` could never hold all ``tasks`` at once (None: they could)."""
    whole = request.whole_gpus
    if not whole:
        return None  # the engine makes gangs of whole GPUs only
    held = sum(_tasks_on(node, request, gpu_types) for node in nodes)
    if held >= tasks:
        return None
    gpus = sum(len(node.gpus) for node in nodes)
    return (
        f"a gang of {tasks} tasks of {whole} {'GPU' if whole == 1 else 'GPUs'} each "
        f"({tasks * whole} GPUs) can never start: the pool holds at most {held} such tasks "
        f"at once ({gpus} GPUs on {len(nodes)} nodes)"
    )


def _tasks_on(node: NodeCapacity, request: ResourceRequest, gpu_types: tuple[str, ...]) -> int:
    """How many whole-GPU tasks of ``request`` an empty ``node`` holds at once."""
    least = request.gpu_memory_bytes or 0
    usable = sum(
        1 for gpu in node.gpus if gpu.memory_bytes >= least and model_matches(gpu_types, gpu.model)
    )
    count = usable // request.whole_gpus
    if request.cpus > 0:
        count = min(count, int(node.cpus / request.cpus + 1e-9))
    if request.memory_bytes:
        count = min(count, node.memory_bytes // request.memory_bytes)
    return count
