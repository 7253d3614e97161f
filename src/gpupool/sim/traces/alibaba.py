"""Alibaba's GPU-sharing traces (``openb`` pod and node lists, ``alibaba:PODS[?nodes=NODES]``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from gpupool.domain.jobs import ResourceRequest
from gpupool.domain.units import GiB, MiB
from gpupool.scheduler.types import GpuCapacity, NodeCapacity
from gpupool.sim.traces._common import (
    UNTIMED_DURATION,
    Row,
    Table,
    Trace,
    build_trace,
    gc_paused,
    parse_gpu_types,
    parse_number,
    read_table,
    valid_request,
)

ALIBABA_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
ALIBABA_TIMES = ("creation_time", "deletion_time")
ALIBABA_DEFAULT_TEAM = "pods"  # the team of every pod of a list without a qos column

GPU_MEMORY_BYTES: Mapping[str, int] = MappingProxyType(
    {
        # Public models: the memory of the card sold under that name.
        "T4": 16 * GiB,
        "P100": 16 * GiB,
        "V100M16": 16 * GiB,
        "V100M32": 32 * GiB,
        "A10": 24 * GiB,
        # G1, G2, G3 are Alibaba's undisclosed internal codes. Assumption: 16 GiB, the size most
        # of the trace's public models share. The openb pods ask for GPU compute (gpu_milli),
        # never GPU memory, and the scheduler sizes a fraction's memory in proportion to the
        # GPU, so this figure only matters to jobs that ask for GPU memory explicitly.
        "G1": 16 * GiB,
        "G2": 16 * GiB,
        "G3": 16 * GiB,
    }
)
"""GPU memory per model of the Alibaba node lists, which give no GPU memory."""


@gc_paused()
def load_alibaba(pods_path: str | Path, nodes_path: str | Path | None = None) -> Trace:
    """Load an Alibaba ``openb`` pod list, and its cluster from a node list when given.

    Only the columns used are required: ``cpu_milli,memory_mib,num_gpu,gpu_milli``, and the
    times ``creation_time,deletion_time`` (both or neither); ``gpu_spec``, ``qos`` and
    ``scheduled_time`` are used when present.

    - team: the trace has no tenants, so the pod's QoS class (``LS``, ``BE``, ``Burstable``,
      ``Guaranteed``) stands in for the team, and the user is the team; without a ``qos``
      column every pod is of team :data:`ALIBABA_DEFAULT_TEAM`.
    - submit: ``creation_time``; run time: ``deletion_time - scheduled_time`` when the pod was
      scheduled and that is positive, else ``deletion_time - creation_time`` (pods still
      ``Pending`` at the end have no ``scheduled_time``; their wait counts as run time). Rows
      with neither positive are skipped and counted.
    - GPUs: ``num_gpu`` 0 -> no GPU; ``num_gpu`` 1 with ``gpu_milli`` < 1000 -> the fraction
      ``gpu_milli / 1000``; otherwise ``num_gpu`` whole GPUs. ``gpu_spec`` (``A|B``) gives the
      allowed GPU models, empty = any.
    - CPUs: ``cpu_milli / 1000``; memory: ``memory_mib`` MiB.

    A list without times (the ``multigpu50`` variant: ``name`` and the four resource columns)
    loads as an untimed task list (``Trace.timed`` False): enough for the fill experiment,
    which takes tasks in file order and never ends them, not for a replay.
    """
    table = read_table(pods_path, "Alibaba pod list", _ALIBABA_POD_REQUIRED)
    timed = _alibaba_timed(table)
    columns = table.columns
    spec_at, qos_at = columns.get("gpu_spec"), columns.get("qos")
    picked: list[Row] = []
    skipped = 0
    for job_id, (line, row) in enumerate(table.rows, start=1):
        try:
            when = _alibaba_times(row, columns) if timed else (0.0, UNTIMED_DURATION)
            if when is None:
                skipped += 1
                continue
            request = _alibaba_request(row, columns)
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        gpu_types = parse_gpu_types(row[spec_at]) if spec_at is not None else ()
        team = row[qos_at].strip() if qos_at is not None else ALIBABA_DEFAULT_TEAM
        picked.append((when[0], job_id, when[1], team, team, request, gpu_types))
    nodes = load_alibaba_nodes(nodes_path) if nodes_path is not None else ()
    name = f"alibaba:{table.path.name}"
    return build_trace(name, picked, nodes=nodes, skipped=skipped, timed=timed)


_ALIBABA_POD_REQUIRED = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


def _alibaba_timed(table: Table) -> bool:
    """Whether a pod list has arrival and run times: both time columns, or neither."""
    present = [name for name in ALIBABA_TIMES if name in table.columns]
    if len(present) == 1:
        missing = next(name for name in ALIBABA_TIMES if name not in present)
        raise ValueError(
            f"{table.path} has {present[0]} but not {missing}: a pod list gives both times "
            "(a replay) or neither (the fill experiment, --fragmentation)"
        )
    return bool(present)


def _alibaba_times(row: list[str], columns: Mapping[str, int]) -> tuple[float, float] | None:
    """(submit, run time) of a pod; None when it has no usable run time."""
    created = parse_number(row[columns["creation_time"]], "creation_time")
    duration = _alibaba_duration(
        row, created, columns["deletion_time"], columns.get("scheduled_time")
    )
    return None if duration is None else (created, duration)


def _alibaba_request(row: list[str], columns: Mapping[str, int]) -> ResourceRequest:
    gpus = _alibaba_gpus(row[columns["num_gpu"]], row[columns["gpu_milli"]])
    cpus = parse_number(row[columns["cpu_milli"]], "cpu_milli") / 1000
    memory = parse_number(row[columns["memory_mib"]], "memory_mib")
    if memory < 0:
        raise ValueError(f"memory_mib '{row[columns['memory_mib']]}' is negative")
    return valid_request(gpus, cpus, int(memory * MiB))


def _alibaba_duration(
    row: list[str], created: float, deleted_at: int, scheduled_at: int | None
) -> float | None:
    """Run time of a pod: from scheduling (else creation) to deletion; None when not positive."""
    if not row[deleted_at].strip():
        return None
    deleted = parse_number(row[deleted_at], "deletion_time")
    if scheduled_at is not None and row[scheduled_at].strip():
        ran = deleted - parse_number(row[scheduled_at], "scheduled_time")
        if ran > 0:
            return ran
    lived = deleted - created
    return lived if lived > 0 else None


def _alibaba_gpus(num_gpu: str, gpu_milli: str) -> float | None:
    """GPUs of a pod: None for none, a fraction for a shared GPU, else a whole count."""
    count = parse_number(num_gpu, "num_gpu")
    if count < 0 or count != int(count):
        raise ValueError(f"num_gpu '{num_gpu}' is not a whole number of GPUs")
    if count == 0:
        return None
    milli = parse_number(gpu_milli, "gpu_milli")
    if count == 1 and milli < 1000:
        if milli <= 0:
            raise ValueError(f"gpu_milli '{gpu_milli}' must be more than 0 with num_gpu 1")
        return milli / 1000
    return count


def load_alibaba_nodes(path: str | Path) -> tuple[NodeCapacity, ...]:
    """Load an ``openb`` node list (``sn,cpu_milli,memory_mib,gpu,model``) as node capacities.

    Every listed node is kept: the all-node list includes its CPU-only nodes (0 GPUs), the
    GPU-node list has none. GPU ``i`` of node ``sn`` is ``f"{sn}-gpu{i}"``; its memory comes from
    :data:`GPU_MEMORY_BYTES` (the trace gives none); an unknown model with GPUs is an error.
    """
    table = read_table(path, "Alibaba node list", ALIBABA_NODE_COLUMNS)
    name_at, cpu_at, mem_at, gpu_at, model_at = (
        table.columns[name] for name in ALIBABA_NODE_COLUMNS
    )
    nodes = []
    for line, row in table.rows:
        name, model = row[name_at].strip(), row[model_at].strip()
        try:
            cpus = parse_number(row[cpu_at], "cpu_milli") / 1000
            memory = parse_number(row[mem_at], "memory_mib")
            count = parse_number(row[gpu_at], "gpu")
        except ValueError as exc:
            raise table.error(line, str(exc)) from None
        if not name or cpus < 0 or memory < 0 or count < 0 or count != int(count):
            raise table.error(line, "a node needs a name and non-negative whole resources")
        if count and model not in GPU_MEMORY_BYTES:
            known = ", ".join(GPU_MEMORY_BYTES)
            raise table.error(line, f"GPU model '{model}' has no known memory (known: {known})")
        gpus = tuple(
            GpuCapacity(f"{name}-gpu{index}", index, model, GPU_MEMORY_BYTES[model])
            for index in range(int(count))
        )
        nodes.append(NodeCapacity(name, gpus, cpus, int(memory * MiB)))
    return tuple(nodes)
