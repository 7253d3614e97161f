"""GPU fragmentation under load, measured as the FGD paper does (Weng et al., ATC'23).

**Fragmentation** (FGD's measure): the unallocated GPU capacity that the *typical* task cannot
use. The typical task is the workload's mix of GPU demands, each shape ``m`` (a share of one
GPU, or a count of whole GPUs, with its allowed GPU models) weighted by how often it occurs
(``p_m``). For one node and one shape, the fragment is the free share of every GPU the task
could not use: all of the node's free GPU capacity when the task cannot run there at all
(too few fully free GPUs of an allowed model, or no GPU with enough free share); else, for a
fraction ``d``, the GPUs with less than ``d`` free; for whole GPUs, the partly used GPUs.
A node's fragmentation is ``sum_m p_m * fragment(node, m)``; the pool's is the sum over nodes,
in GPUs. Only GPU dimensions count here (the FGD paper also counts CPUs): a task that fits
every GPU test is assumed to fit the node's CPUs and memory.

**The fill experiment** (FGD's evaluation): tasks of the trace arrive one after another on the
empty cluster and never end, until the GPUs they ask for reach ``until`` times the cluster's
(the trace is repeated as needed, as FGD inflates it by sampling); a task that does not fit
when it arrives fails. The figures: the unallocated share of the GPUs when the first task
fails, and at given *arrived workloads* (GPUs asked by the tasks so far / GPUs of the
cluster). With nothing ever ending, a perfect packer leaves ``max(0, 100 % - arrived)``
unallocated; what a policy leaves beyond that is fragmentation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpupool.domain.policy import Policy
from gpupool.scheduler.packing import TaskShape, node_fragment, shapes_of
from gpupool.scheduler.types import SHARE_EPSILON, Allocation, NodeCapacity, PendingJob
from gpupool.sim.engine import Probe, SimResult, simulate, task_shape
from gpupool.sim.traces import TraceJob

FOREVER = 1e15  # seconds: the run time of a task in the fill experiment
SPACING = 1e-3  # seconds between batches of arrivals: attained service stays ~0
LEVELS = (0.8, 0.9, 1.0, 1.1)  # arrived workloads reported
LOADED = 0.9  # replays: sample fragmentation at arrivals once this share of GPUs is allocated


def workload(
    jobs: Iterable[TraceJob], placement: str = "node", largest_node: int = 0
) -> tuple[TaskShape, ...]:
    """The GPU demands of ``jobs`` (those asking for GPUs) with their frequencies: one task
    per job, as the engine shapes it in ``placement`` mode (a 16-GPU job on 8-GPU nodes is
    a task of 8 GPUs; ``largest_node`` 0: jobs as they are)."""
    counts: Counter[tuple[float, tuple[str, ...], float]] = Counter()
    for job in jobs:
        if job.request.gpu_count > 0:
            request, _ = task_shape(job.request, placement, largest_node)
            counts[(request.gpu_count, job.gpu_types, 0.0)] += 1  # GPUs alone, as FGD's
    return shapes_of(counts)


@dataclass(frozen=True, slots=True)
class Sample:
    """The pool after the arrivals of one event time: GPUs asked so far, allocated, and the
    fragmentation (None when not measured), in GPUs."""

    arrived: float
    allocated: float
    fragmentation: float | None


class FragmentationProbe:
    """Follows a replay's GPU shares node by node and samples fragmentation at arrivals.

    ``every_arrival``: measure at every arrival (the fill experiment); else only once
    ``LOADED`` of the GPUs are allocated.
    """

    def __init__(
        self,
        nodes: Sequence[NodeCapacity],
        shapes: Sequence[TaskShape],
        every_arrival: bool = False,
    ) -> None:
        schedulable = [node for node in nodes if node.schedulable and node.gpus]
        self.shapes = tuple(shapes)
        self.every_arrival = every_arrival
        self.node_of: dict[str, int] = {}
        self.free: list[list[float]] = []
        self.models: list[tuple[str, ...]] = []
        self.slot: dict[str, tuple[int, int]] = {}  # GPU uuid: (node, position)
        for index, node in enumerate(schedulable):
            self.node_of[node.name] = index
            self.free.append([1.0] * len(node.gpus))
            self.models.append(tuple(gpu.model for gpu in node.gpus))
            for position, gpu in enumerate(node.gpus):
                self.slot[gpu.uuid] = (index, position)
        self.total = float(len(self.slot))
        self.allocated = 0.0
        self.arrived_gpus = 0.0
        self.fragments = [self._fragment(index) for index in range(len(self.free))]
        self.dirty: set[int] = set()
        self.samples: list[Sample] = []
        self.first_failure: Sample | None = None

    def started(self, allocations: Sequence[Allocation]) -> None:
        self._change(allocations, -1.0)

    def stopped(self, allocations: Sequence[Allocation]) -> None:
        self._change(allocations, 1.0)

    def arrived(self, jobs: Sequence[TraceJob], pending: Mapping[int, PendingJob]) -> None:
        self.arrived_gpus += sum(job.request.gpu_count for job in jobs)
        measure = self.every_arrival or self.allocated >= LOADED * self.total - SHARE_EPSILON
        sample = Sample(
            self.arrived_gpus, self.allocated, self.fragmentation() if measure else None
        )
        self.samples.append(sample)
        failed = any(job.job_id in pending and job.request.gpu_count > 0 for job in jobs)
        if failed and self.first_failure is None:
            self.first_failure = replace(sample, fragmentation=self.fragmentation())

    def fragmentation(self) -> float:
        """The pool's fragmentation now, in GPUs (nodes changed since the last call redone)."""
        for index in self.dirty:
            self.fragments[index] = self._fragment(index)
        self.dirty.clear()
        return math.fsum(self.fragments)

    def _fragment(self, index: int) -> float:
        free, models = self.free[index], self.models[index]
        return math.fsum(shape.weight * node_fragment(free, models, shape) for shape in self.shapes)

    def _change(self, allocations: Sequence[Allocation], sign: float) -> None:
        for allocation in allocations:
            for part in allocation.gpus:
                found = self.slot.get(part.uuid)
                if found is None:
                    continue
                index, position = found
                free = self.free[index]
                free[position] = min(1.0, max(0.0, free[position] + sign * part.share))
                self.allocated -= sign * part.share
                self.dirty.add(index)


@dataclass(frozen=True, slots=True)
class FillReport:
    """The figures of one fill experiment, as shares of the cluster's GPUs."""

    total_gpus: float
    tasks: int  # tasks that arrived
    failed: int  # tasks that did not fit when they arrived
    first_failure: Sample | None
    at_levels: dict[float, Sample] = field(default_factory=dict)  # arrived workload: sample
    final: Sample | None = None
    preemptions: int = 0

    def unallocated(self, sample: Sample | None) -> float | None:
        return None if sample is None else 1.0 - sample.allocated / self.total_gpus


def fill(
    jobs: Sequence[TraceJob],
    nodes: Sequence[NodeCapacity],
    settings: Policy,
    *,
    until: float = max(LEVELS),
    batch: int = 10,
    watch: Callable[[Probe, int], Probe] | None = None,
) -> FillReport:
    """FGD's fill experiment of ``jobs`` on ``nodes`` under ``settings``.

    ``batch`` tasks arrive together (one scheduling cycle): under a first-come order with
    nothing ending this places exactly as one cycle per task would, only faster. ``watch``
    (probe, number of tasks) -> the probe the replay reports to, passing every event on
    (a progress display: :mod:`gpupool.sim.progress`).
    """
    largest = max((len(node.gpus) for node in nodes if node.schedulable), default=0)
    probe = FragmentationProbe(nodes, workload(jobs, "node", largest), every_arrival=True)
    tasks = fill_jobs(jobs, probe.total * until, batch)
    watched = watch(probe, len(tasks)) if watch is not None else probe
    result = simulate(tasks, nodes, settings=settings, probe=watched, drop_unplaced=True)
    return fill_report(probe, tasks, result)


def fill_jobs(jobs: Sequence[TraceJob], gpus: float, batch: int = 10) -> list[TraceJob]:
    """The tasks of ``jobs`` in submit order, repeated until they ask for ``gpus`` GPUs;
    ``batch`` at a time, ``SPACING`` apart, each running ``FOREVER``; numbered from 1.
    Tasks without GPUs come along (their CPUs and memory can strand a node's GPUs)."""
    source = list(jobs)
    if gpus <= 0 or not any(job.request.gpu_count > 0 for job in source):
        return []
    tasks: list[TraceJob] = []
    asked = 0.0
    while asked < gpus:
        job = source[len(tasks) % len(source)]
        submit = (len(tasks) // max(1, batch)) * SPACING
        tasks.append(replace(job, job_id=len(tasks) + 1, submit=submit, duration=FOREVER))
        asked += job.request.gpu_count
    return tasks


def fill_report(
    probe: FragmentationProbe, tasks: Sequence[TraceJob], result: SimResult
) -> FillReport:
    at_levels: dict[float, Sample] = {}
    for level in LEVELS:
        wanted = level * probe.total - SHARE_EPSILON
        found = next((sample for sample in probe.samples if sample.arrived >= wanted), None)
        if found is not None:
            at_levels[level] = found
    return FillReport(
        total_gpus=probe.total,
        tasks=len(tasks),
        failed=len(result.unscheduled),
        first_failure=probe.first_failure,
        at_levels=at_levels,
        final=probe.samples[-1] if probe.samples else None,
        preemptions=result.preemptions,
    )


def loaded_fragmentation(probe: FragmentationProbe) -> float | None:
    """Replays: the mean fragmentation, as a share of the unallocated GPUs, over the arrivals
    that found the pool loaded (None: it never was)."""
    ratios = [
        sample.fragmentation / (probe.total - sample.allocated)
        for sample in probe.samples
        if sample.fragmentation is not None and probe.total - sample.allocated > SHARE_EPSILON
    ]
    return math.fsum(ratios) / len(ratios) if ratios else None
