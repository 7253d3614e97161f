"""Messages for people: what a request needs and the most there is, with real figures.

``waiting_message``: against the free capacity ("the largest free block is 2 on node-a").
``size_message``: against empty nodes ("the largest node has 8 GPUs (node-a)").
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.domain.jobs import Reason
from gpupool.domain.units import format_bytes
from gpupool.scheduler.fit import Demand
from gpupool.scheduler.shortfall import Shortfall
from gpupool.scheduler.types import SHARE_EPSILON, NodeCapacity

NO_NODES_MESSAGE = "there are no schedulable nodes in the pool"
# What to do about too few CPUs or too little memory. The default is easy to miss (a task asks
# for 1 CPU unless told), and a host with many GPUs and few cores then runs few GPU jobs at once.
CPU_HINT = (
    "a task asks for 1 CPU unless run with --cpus (e.g. --cpus 0.25); an admin can let the "
    "node run more at once with gpupool server --declare-cpus N (GPUPOOL_DECLARED_CPUS)"
)
MEMORY_HINT = (
    "ask for less with --memory; an admin can declare a node's memory with gpupool server "
    "--declare-memory (GPUPOOL_DECLARED_MEMORY)"
)


def no_nodes_message(nodes: Sequence[NodeCapacity]) -> str:
    """Why no node takes new work: none has joined, or each one is drained or down (named,
    with what ends the wait)."""
    if not nodes:
        return NO_NODES_MESSAGE
    drained = sorted(node.name for node in nodes if node.drained)  # whatever the nodes' order
    down = sorted(node.name for node in nodes if not node.drained)
    if not down:
        return (
            f"{NO_NODES_MESSAGE}: every node is drained ({_names(drained)}); it waits until an "
            "admin undrains one (gpupool node undrain NAME)"
        )
    if not drained:
        return f"{NO_NODES_MESSAGE}: every node is down ({_names(down)}); it waits until one is up"
    return (
        f"{NO_NODES_MESSAGE}: {len(drained)} drained ({_names(drained)}) and {len(down)} down "
        f"({_names(down)}); it waits until an admin undrains one (gpupool node undrain NAME) or "
        "one is up"
    )


def _names(names: Sequence[str], shown: int = 3) -> str:
    """'a, b, c' or 'a, b, c and 4 more'."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def plural(count: float, word: str) -> str:
    return word if count == 1 else f"{word}s"


def format_share(share: float) -> str:
    return f"{round(share, 3):g}"


def format_cpus(cpus: float) -> str:
    return f"{round(cpus, 2):g}"


def gpu_need(demand: Demand) -> str:
    """What the GPU part asks for: '4 GPUs with at least 40 GiB each', '0.5 of a GPU'."""
    memory = demand.gpu_memory
    if demand.whole:
        count = demand.whole
        each = "" if memory is None else f" with at least {format_bytes(memory)}"
        each += " each" if memory is not None and count > 1 else ""
        return f"{count} {plural(count, 'GPU')}{each}"
    if demand.gpus > 0:
        with_memory = f" with {format_bytes(memory)} free" if memory is not None else ""
        return f"{format_share(demand.gpus)} of a GPU{with_memory}"
    return f"{format_bytes(memory)} of GPU memory"


def cpu_need(demand: Demand) -> str:
    return f"{format_cpus(demand.cpus)} {plural(demand.cpus, 'CPU')}"


def _qualifier(demand: Demand, code: Reason) -> str:
    """Which nodes the CPU or memory figure is taken over."""
    if code is Reason.INSUFFICIENT_CPU:
        return " with room for its GPUs" if demand.uses_gpus else ""
    if demand.uses_gpus:
        return " with room for its GPUs and CPUs"
    return " with room for its CPUs"


def waiting_message(demand: Demand, shortfall: Shortfall) -> str:
    """Why ``demand`` does not fit the free capacity now."""
    if shortfall.code is Reason.INSUFFICIENT_CPU:
        most = format_cpus(shortfall.cpus)
        where = f"a node{_qualifier(demand, shortfall.code)}"
        return (
            f"needs {cpu_need(demand)}; the most free on {where} is {most} on {shortfall.node}; "
            f"{CPU_HINT}"
        )
    if shortfall.code is Reason.INSUFFICIENT_MEMORY:
        need, most = format_bytes(demand.memory), format_bytes(shortfall.memory)
        where = f"a node{_qualifier(demand, shortfall.code)}"
        return (
            f"needs {need} of memory; the most free on {where} is {most} on {shortfall.node}; "
            f"{MEMORY_HINT}"
        )
    if demand.whole:
        return f"needs {gpu_need(demand)} on one node; {_free_block(demand, shortfall)}"
    return f"needs {gpu_need(demand)}; {_most_free_gpu(shortfall)}"


def _free_block(demand: Demand, shortfall: Shortfall) -> str:
    if shortfall.count == 0:
        memory = demand.gpu_memory
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


def size_message(demand: Demand, shortfall: Shortfall) -> str:
    """Why ``demand`` fits none of the nodes even when they are empty."""
    if shortfall.code is Reason.INSUFFICIENT_CPU:
        largest = f"{format_cpus(shortfall.cpus)} {plural(shortfall.cpus, 'CPU')}"
        node = f"the largest node{_qualifier(demand, shortfall.code)}"
        return (
            f"needs {cpu_need(demand)} on one node; {node} has {largest} ({shortfall.node}); "
            f"{CPU_HINT}"
        )
    if shortfall.code is Reason.INSUFFICIENT_MEMORY:
        need, largest = format_bytes(demand.memory), format_bytes(shortfall.memory)
        node = f"the largest node{_qualifier(demand, shortfall.code)}"
        return (
            f"needs {need} of memory on one node; {node} has {largest} ({shortfall.node}); "
            f"{MEMORY_HINT}"
        )
    if demand.whole:
        return f"needs {gpu_need(demand)} on one node; {_largest_node(demand, shortfall)}"
    if shortfall.node is None:
        return f"needs {gpu_need(demand)}; no node has GPUs"
    largest = format_bytes(shortfall.memory)
    return f"needs {gpu_need(demand)}; the largest GPU has {largest} ({shortfall.node})"


def _largest_node(demand: Demand, shortfall: Shortfall) -> str:
    memory = demand.gpu_memory
    such = f" with at least {format_bytes(memory)}" if memory is not None else ""
    if shortfall.count == 0:
        return f"no node has a GPU{such}"
    gpus = f"{shortfall.count} {plural(shortfall.count, 'GPU')}{such}"
    return f"the largest node has {gpus} ({shortfall.node})"
