"""A distributed job's tasks as placed (``Gang``) and what each starts (``TaskLaunch``).

The data the launchers (``domain.launchers`` and ``domain.mpi``) read and answer with; the
executor builds the ``Gang`` from an attempt's tasks and writes each ``TaskLaunch`` as JSON
for ``gpupool.runner.ranks``.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GangTask(Frozen):
    """One task of a gang as placed: where it runs and which GPUs it holds there.

    ``procs``: the processes (ranks) it runs, as the job asked (``procs_per_node``); None:
    one per whole GPU, else one."""

    index: int = Field(ge=0)
    node: str = Field(min_length=1)
    address: str = Field(min_length=1)  # the node's address as the other nodes reach it
    gpus: float = Field(default=0, ge=0)  # GPUs of the task: whole, or one fraction below 1
    gpu_indices: tuple[int, ...] = ()  # their local indices on the node
    port: int | None = Field(default=None, ge=1, le=65535)  # reserved for this task (TF)
    procs: int | None = Field(default=None, ge=1, le=1024)

    @model_validator(mode="after")
    def _indices_match_count(self) -> GangTask:
        if self.gpus >= 1 and not float(self.gpus).is_integer():
            raise ValueError(f"task {self.index} asks {self.gpus} GPUs: whole, or one fraction")
        expected = 0 if self.gpus == 0 else 1 if self.gpus < 1 else int(self.gpus)
        if len(self.gpu_indices) != expected:
            raise ValueError(f"task {self.index}: {self.gpus} GPUs but {self.gpu_indices}")
        return self

    @property
    def process_count(self) -> int:
        """Ranks of this task: ``procs`` when asked, else one per whole GPU, else one."""
        if self.procs is not None:
            return self.procs
        return int(self.gpus) if self.gpus >= 1 else 1


class Gang(Frozen):
    """A distributed job's tasks as placed, in task order, and its rendezvous port."""

    job_id: str = Field(min_length=1)
    tasks: tuple[GangTask, ...] = Field(min_length=1)
    rendezvous_port: int = Field(ge=1, le=65535)  # free on task 0's node, chosen by the caller

    @model_validator(mode="after")
    def _tasks_in_order(self) -> Gang:
        if [task.index for task in self.tasks] != list(range(len(self.tasks))):
            raise ValueError("the tasks are indexed 0, 1, ... in order")
        return self

    @property
    def world_size(self) -> int:
        """Ranks of the whole gang."""
        return sum(t.process_count for t in self.tasks)

    def rank_offset(self, task: GangTask) -> int:
        """The global rank of ``task``'s first process."""
        return sum(t.process_count for t in self.tasks[: task.index])

    def with_procs(self, procs: int | None) -> Gang:
        """The gang with every task running ``procs`` processes (None: as it is)."""
        if procs is None:
            return self
        tasks = tuple(t.model_copy(update={"procs": procs}) for t in self.tasks)
        return self.model_copy(update={"tasks": tasks})


class ProcessSpec(Frozen):
    """One process to start: ``env`` goes over the job's own environment, ``env_defaults``
    only where the job's environment lacks the variable."""

    argv: tuple[str, ...]
    env: dict[str, str]
    env_defaults: dict[str, str] = Field(default_factory=dict)
    rank: int | None = None  # the global rank (log prefixes); None for a placeholder
    local_rank: int | None = None


class TaskLaunch(Frozen):
    """What one task starts, and the files to write into its working directory first."""

    task_index: int
    node: str
    processes: tuple[ProcessSpec, ...]
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> content
    decides_exit: bool = True  # False: a placeholder, stopped when the deciding tasks end


def gpupool_env(gang: Gang, task: GangTask) -> dict[str, str]:
    """What every process of every launcher gets."""
    return {
        "GPUPOOL_NODE": task.node,
        "GPUPOOL_TASK_INDEX": str(task.index),
        "GPUPOOL_TASK_COUNT": str(len(gang.tasks)),
    }


def is_loopback(address: str) -> bool:
    """Whether ``address`` is a loopback IP ("localhost" and other names are not read)."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_port(address: str, port: int) -> str:
    """ "10.0.0.1:29500"; an IPv6 address in brackets: "[fe80::1]:29500"."""
    try:
        is_v6 = ipaddress.ip_address(address).version == 6
    except ValueError:
        is_v6 = False  # a host name
    return f"[{address}]:{port}" if is_v6 else f"{address}:{port}"
