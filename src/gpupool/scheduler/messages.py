"""Messages for people: what a request needs and the most there is, with real figures.

``waiting_message``: against the free capacity ("the largest free block is 2 on node-a").
``size_message``: against empty nodes ("the largest node has 8 GPUs (node-a)").
"""

from __future__ import annotations

from gpupool.domain.jobs import Reason, ResourceRequest
from gpupool.domain.units import format_bytes
from gpupool.scheduler.fit import gpu_count, host_memory
from gpupool.scheduler.shortfall import Shortfall
from gpupool.scheduler.types import SHARE_EPSILON

NO_NODES_MESSAGE = "there are no schedulable nodes in the pool"


def plural(count: float, word: str) -> str:
    return word if count == 1 else f"{word}s"


def format_share(share: float) -> str:
    return f"{round(share, 3):g}"


def format_cpus(cpus: float) -> str:
    return f"{round(cpus, 2):g}"


def gpu_need(request: ResourceRequest) -> str:
    """What the GPU part asks for: '4 GPUs with at least 40 GiB each', '0.5 of a GPU'."""
    memory = request.gpu_memory_bytes
    if request.whole_gpus:
        count = request.whole_gpus
        each = "" if memory is None else f" with at least {format_bytes(memory)}"
        each += " each" if memory is not None and count > 1 else ""
        return f"{count} {plural(count, 'GPU')}{each}"
    if gpu_count(request) > 0:
        with_memory = f" with {format_bytes(memory)} free" if memory is not None else ""
        return f"{format_share(gpu_count(request))} of a GPU{with_memory}"
    return f"{format_bytes(memory)} of GPU memory"


def cpu_need(request: ResourceRequest) -> str:
    return f"{format_cpus(request.cpus)} {plural(request.cpus, 'CPU')}"


def _qualifier(request: ResourceRequest, code: Reason) -> str:
    """Which nodes the CPU or memory figure is taken over."""
    if code is Reason.INSUFFICIENT_CPU:
        return " with room for its GPUs" if request.uses_gpus else ""
    if request.uses_gpus:
        return " with room for its GPUs and CPUs"
    return " with room for its CPUs"


def waiting_message(request: ResourceRequest, shortfall: Shortfall) -> str:
    """Why ``request`` does not fit the free capacity now."""
    if shortfall.code is Reason.INSUFFICIENT_CPU:
        most = format_cpus(shortfall.cpus)
        where = f"a node{_qualifier(request, shortfall.code)}"
        return f"needs {cpu_need(request)}; the most free on {where} is {most} on {shortfall.node}"
    if shortfall.code is Reason.INSUFFICIENT_MEMORY:
        need, most = format_bytes(host_memory(request)), format_bytes(shortfall.memory)
        where = f"a node{_qualifier(request, shortfall.code)}"
        return f"needs {need} of memory; the most free on {where} is {most} on {shortfall.node}"
    if request.whole_gpus:
        return f"needs {gpu_need(request)} on one node; {_free_block(request, shortfall)}"
    return f"needs {gpu_need(request)}; {_most_free_gpu(shortfall)}"


def _free_block(request: ResourceRequest, shortfall: Shortfall) -> str:
    if shortfall.count == 0:
        memory = request.gpu_memory_bytes
        kind = f"GPU with at least {format_bytes(memory)}" if memory is not None else "GPU"
        return f"no {kind} is free on any node"
    return f"the largest free block is {shortfall.count} on {shortfall.node}"


def _most_free_gpu(shortfall: Shortfall) -> str:
    if shortfall.node is None:
        return "the pool has no GPUs"
    if shortfall.share <= SHARE_EPSILON and shortfall.memory == 0:
        return "every GPU is fully used"
    share, memory = format_share(shortfall.share), format_bytes(shortfall.memory)
    return f"the most free on any GPU is {share} with {memory} on {shortfall.node}"


def size_message(request: ResourceRequest, shortfall: Shortfall) -> str:
    """Why ``request`` fits none of the nodes even when they are empty."""
    if shortfall.code is Reason.INSUFFICIENT_CPU:
        largest = f"{format_cpus(shortfall.cpus)} {plural(shortfall.cpus, 'CPU')}"
        node = f"the largest node{_qualifier(request, shortfall.code)}"
        return f"needs {cpu_need(request)} on one node; {node} has {largest} ({shortfall.node})"
    if shortfall.code is Reason.INSUFFICIENT_MEMORY:
        need, largest = format_bytes(host_memory(request)), format_bytes(shortfall.memory)
        node = f"the largest node{_qualifier(request, shortfall.code)}"
        return f"needs {need} of memory on one node; {node} has {largest} ({shortfall.node})"
    if request.whole_gpus:
        return f"needs {gpu_need(request)} on one node; {_largest_node(request, shortfall)}"
    if shortfall.node is None:
        return f"needs {gpu_need(request)}; no node has GPUs"
    largest = format_bytes(shortfall.memory)
    return f"needs {gpu_need(request)}; the largest GPU has {largest} ({shortfall.node})"


def _largest_node(request: ResourceRequest, shortfall: Shortfall) -> str:
    memory = request.gpu_memory_bytes
    such = f" with at least {format_bytes(memory)}" if memory is not None else ""
    if shortfall.count == 0:
        return f"no node has a GPU{such}"
    gpus = f"{shortfall.count} {plural(shortfall.count, 'GPU')}{such}"
    return f"the largest node has {gpus} ({shortfall.node})"
