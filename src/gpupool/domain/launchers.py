"""How the processes of a distributed job start: per task, the commands and environments.

The caller (the executor) hands in the gang's layout -- its tasks in order, each with its
node, the address the other nodes reach that node at and its GPUs -- a rendezvous port it
reserved on task 0's node, the job's launcher and the user's command. :func:`plan_launch`
answers, per task, the processes to start (argv, environment, rank) and the files to write
into the task's working directory first. Every process gets ``GPUPOOL_NODE``,
``GPUPOOL_TASK_INDEX`` and ``GPUPOOL_TASK_COUNT``. GPU pinning stays the executor's:
every process of a task sees all of the task's GPUs (``CUDA_VISIBLE_DEVICES``), and a rank
picks its own with ``LOCAL_RANK``, as under torchrun.

Launchers and their modes:

* ``torch``, mode ``per-gpu`` (the default): one process per GPU of the task (one for a
  CPU-only or fractional task; ``procs_per_node`` when given), each with the variables
  torchrun gives its workers. Mode ``torchrun``: one ``torchrun`` per task, with the c10d
  rendezvous at task 0. Mode ``per-node``: one process per task running the command as is
  (it runs torchrun itself, or its own rendezvous), with the variables Kubeflow's
  PyTorchJob operator sets. Every mode sets the operator's ``PET_*`` variables.
* ``tensorflow``: one process per task with ``TF_CONFIG`` for MultiWorkerMirroredStrategy:
  all workers by default, or in mode ``chief`` task 0 the chief (TFJob's Chief + Workers).
* ``mpi``: task 0 runs ``mpirun`` over a hostfile of all tasks (``domain.mpi``); in mode
  ``mpirun`` the command is the mpirun line itself.

``procs_per_node`` (the ranks of each task) spreads evenly over a task's whole GPUs: it
divides their count or is a multiple of it.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import Field, model_validator

from gpupool.domain.gangs import (
    Frozen,
    Gang,
    GangTask,
    ProcessSpec,
    TaskLaunch,
    gpupool_env,
    host_port,
)
from gpupool.domain.mpi import (
    MPI_ALIAS_PREFIX,
    MpiAgent,
    mpi_alias,
    mpi_hostfile,
    mpi_task_index,
    mpi_tasks,
    starts_mpirun,
)
from gpupool.errors import InvalidLauncher

# the launch plan's names, for callers that import them from here
__all__ = [
    "MPI_ALIAS_PREFIX",
    "Gang",
    "GangTask",
    "Launcher",
    "LauncherKind",
    "LauncherMode",
    "MpiAgent",
    "ProcessSpec",
    "TaskLaunch",
    "check_request",
    "gpupool_env",
    "host_port",
    "mpi_alias",
    "mpi_hostfile",
    "mpi_task_index",
    "parse_launcher",
    "plan_launch",
    "tf_config",
    "torchrun_program",
]

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
MAX_PROCS_PER_NODE = 1024


class LauncherKind(StrEnum):
    TORCH = "torch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"


class LauncherMode(StrEnum):
    PER_GPU = "per-gpu"  # torch: gpupool starts one process per GPU with torchrun's variables
    TORCHRUN = "torchrun"  # torch: gpupool starts torchrun, which starts the processes
    PER_NODE = "per-node"  # torch: the command as is, once per task, with the operator's env
    CHIEF = "chief"  # tensorflow: task 0 is the chief, the others workers
    MPIRUN = "mpirun"  # mpi: the command is mpirun's own line


# the modes of each launcher; None (no mode) is its default: per-gpu, all workers, mpirun
# written by gpupool
MODES: dict[LauncherKind, tuple[LauncherMode, ...]] = {
    LauncherKind.TORCH: (LauncherMode.PER_GPU, LauncherMode.TORCHRUN, LauncherMode.PER_NODE),
    LauncherKind.TENSORFLOW: (LauncherMode.CHIEF,),
    LauncherKind.MPI: (LauncherMode.MPIRUN,),
}


class Launcher(Frozen):
    """A job's launcher; build it from user input with :func:`parse_launcher`.
    ``procs_per_node``: the processes (ranks) of each task; None: the launcher's default."""

    kind: LauncherKind
    mode: LauncherMode | None = None  # None: the launcher's default
    procs_per_node: int | None = Field(default=None, ge=1, le=MAX_PROCS_PER_NODE)

    @model_validator(mode="after")
    def _mode_is_the_launchers(self) -> Launcher:
        if self.mode is not None and self.mode not in MODES[self.kind]:
            raise ValueError(f"launcher {self.kind} has no mode {self.mode}")
        return self

    def is_mode(self, mode: LauncherMode) -> bool:
        return self.mode is mode


def parse_launcher(
    kind: str, mode: str | None = None, procs_per_node: int | None = None
) -> Launcher:
    """The launcher a user named; InvalidLauncher saying what is accepted otherwise."""
    kinds = ", ".join(k.value for k in LauncherKind)
    if kind not in LauncherKind.__members__.values():
        raise InvalidLauncher(f"unknown launcher '{kind}': use one of {kinds}", field="launcher")
    modes = [m.value for m in MODES[LauncherKind(kind)]]
    if mode is not None and mode not in modes:
        raise InvalidLauncher(
            f"unknown mode '{mode}' of launcher {kind}: use one of {', '.join(modes)}, or "
            "leave the mode out",
            field="mode",
        )
    if procs_per_node is not None and not 1 <= procs_per_node <= MAX_PROCS_PER_NODE:
        raise InvalidLauncher(
            f"procs_per_node is 1 to {MAX_PROCS_PER_NODE}", field="procs_per_node"
        )
    chosen = LauncherMode(mode) if mode else None
    return Launcher(kind=LauncherKind(kind), mode=chosen, procs_per_node=procs_per_node)


def check_request(launcher: Launcher, gpus_per_task: float, command: Sequence[str]) -> None:
    """Refuse at submission what :func:`plan_launch` could not launch (InvalidLauncher)."""
    if not command or not command[0]:
        raise InvalidLauncher("a distributed job needs a command to run", field="command")
    if launcher.kind is LauncherKind.MPI and not float(gpus_per_task).is_integer():
        raise InvalidLauncher(
            f"MPI starts one rank per GPU, so its tasks ask for whole GPUs, not "
            f"{gpus_per_task:g}: use --gpus 1 or more per task (or 0 for CPU-only ranks)",
            field="gpus",
        )
    if launcher.is_mode(LauncherMode.MPIRUN) and not starts_mpirun(command):
        raise InvalidLauncher(
            "mode mpirun runs the command as mpirun's own line, so it starts with mpirun "
            "(mpirun -n 4 ./a.out) or mpiexec: start it so, or leave the mode out and give "
            "the program alone (gpupool writes the mpirun line)",
            field="command",
        )
    if launcher.procs_per_node is not None:
        _check_procs(launcher, launcher.procs_per_node, gpus_per_task)


def _check_procs(launcher: Launcher, procs: int, gpus: float) -> None:
    """TensorFlow's TF_CONFIG names one worker per task; ranks spread evenly over GPUs."""
    if launcher.kind is LauncherKind.TENSORFLOW and procs > 1:
        raise InvalidLauncher(
            "the tensorflow launcher runs one process per node (TF_CONFIG names one worker "
            "per node): leave procs_per_node out, or use more nodes",
            field="procs_per_node",
        )
    whole = int(gpus) if gpus >= 1 else 0
    if whole and procs % whole and whole % procs:
        even = [n for n in range(1, whole + 1) if whole % n == 0]
        raise InvalidLauncher(
            f"{procs} processes per node do not spread evenly over its {whole} GPUs: use a "
            f"divisor of {whole} ({', '.join(map(str, even))}) or a multiple of it "
            f"({whole * 2}, {whole * 3}, ...)",
            field="procs_per_node",
        )


def plan_launch(
    gang: Gang, launcher: Launcher, command: Sequence[str], mpi: MpiAgent | None = None
) -> tuple[TaskLaunch, ...]:
    """Per task of ``gang``, in task order, what to start. ``mpi`` is required for MPI."""
    for task in gang.tasks:
        check_request(launcher, task.gpus, command)
    if launcher.kind is LauncherKind.TENSORFLOW:
        chief = launcher.is_mode(LauncherMode.CHIEF)
        return tuple(_tensorflow_task(gang, task, command, chief) for task in gang.tasks)
    gang = gang.with_procs(launcher.procs_per_node)
    if launcher.kind is LauncherKind.MPI:
        if mpi is None:
            raise ValueError("an MPI launch needs the rsh agent (MpiAgent)")
        return mpi_tasks(gang, command, mpi, as_given=launcher.is_mode(LauncherMode.MPIRUN))
    if launcher.is_mode(LauncherMode.TORCHRUN):
        return tuple(_torchrun_task(gang, task, command) for task in gang.tasks)
    if launcher.is_mode(LauncherMode.PER_NODE):
        procs = launcher.procs_per_node
        return tuple(_per_node_task(gang, task, command, procs) for task in gang.tasks)
    return tuple(_per_gpu_task(gang, task, command) for task in gang.tasks)


# -- torch -----------------------------------------------------------------------------------


def torch_env(gang: Gang, task: GangTask, local_rank: int) -> dict[str, str]:
    """The variables torchrun gives a worker, for ``local_rank`` of ``task``.

    As torch's LocalElasticAgent._start_workers sets them (torch/distributed/elastic/agent/
    server/local_elastic_agent.py; documented under "torchrun > Environment Variables"):
    RANK, GROUP_RANK, ROLE_RANK, ROLE_NAME, LOCAL_WORLD_SIZE, WORLD_SIZE, GROUP_WORLD_SIZE,
    ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK and the TORCHELASTIC_* run facts.
    With one role, ROLE_RANK is RANK and ROLE_WORLD_SIZE is WORLD_SIZE. Not torchrun's:
    NODE_RANK (= GROUP_RANK), read by PyTorch Lightning and others. TORCHELASTIC_USE_AGENT_
    STORE is False: no agent holds a store, so rank 0 creates it at MASTER_ADDR:MASTER_PORT.
    Left out: TORCHELASTIC_ERROR_FILE (torchrun's per-worker error file; gpupool keeps its
    own exit records) and the watchdog's timer file.
    """
    world = gang.world_size
    rank = gang.rank_offset(task) + local_rank
    return {
        "MASTER_ADDR": gang.tasks[0].address,
        "MASTER_PORT": str(gang.rendezvous_port),
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(task.process_count),
        "GROUP_RANK": str(task.index),
        "GROUP_WORLD_SIZE": str(len(gang.tasks)),
        "NODE_RANK": str(task.index),
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "TORCHELASTIC_RUN_ID": gang.job_id,
        "TORCHELASTIC_RESTART_COUNT": "0",  # gpupool retries a gang as a new attempt
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }


def pet_env(gang: Gang, task: GangTask, nproc_per_node: int | None) -> dict[str, str]:
    """The ``PET_*`` variables Kubeflow's PyTorchJob operator sets (training-operator
    release-1.9, pkg/controller.v1/pytorch/envvar.go and master.go), which torchrun reads as
    its options' defaults and Kubeflow Trainer's torch runtime sets under the same names:
    PET_NNODES (the tasks), PET_NODE_RANK (this task), PET_MASTER_ADDR and PET_MASTER_PORT
    (task 0's rendezvous) and, when known, PET_NPROC_PER_NODE."""
    env = {
        "PET_NNODES": str(len(gang.tasks)),
        "PET_NODE_RANK": str(task.index),
        "PET_MASTER_ADDR": gang.tasks[0].address,
        "PET_MASTER_PORT": str(gang.rendezvous_port),
    }
    if nproc_per_node is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc_per_node)
    return env


def per_node_env(gang: Gang, task: GangTask, procs_per_node: int | None) -> dict[str, str]:
    """What the PyTorchJob operator gives each pod (one per task here): MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE (the pods times nprocPerNode, 1 when not given), RANK (the
    pod's, which is the node's) and the ``PET_*`` (:func:`pet_env`)."""
    return {
        "MASTER_ADDR": gang.tasks[0].address,
        "MASTER_PORT": str(gang.rendezvous_port),
        "WORLD_SIZE": str(len(gang.tasks) * (procs_per_node or 1)),
        "RANK": str(task.index),
        **pet_env(gang, task, procs_per_node),
    }


def torch_env_defaults(task: GangTask) -> dict[str, str]:
    """torchrun's defaults, which a job's own environment overrides: torch's
    distributed/run.py sets OMP_NUM_THREADS=1 when a node runs several workers, and its
    agent defaults TORCH_NCCL_ASYNC_ERROR_HANDLING to 1."""
    defaults = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    if task.process_count > 1:
        defaults["OMP_NUM_THREADS"] = "1"
    return defaults


def torchrun_argv(gang: Gang, task: GangTask, command: Sequence[str]) -> tuple[str, ...]:
    """``torchrun`` for one task, followed by the user's program (see :func:`torchrun_program`).

    ``--rdzv-conf=is_host`` names task 0 as the store's host outright: torchrun would
    otherwise guess it from host names, and tasks sharing a host would all claim it.
    """
    head = gang.tasks[0]
    return (
        "torchrun",
        f"--nnodes={len(gang.tasks)}",
        f"--nproc-per-node={task.process_count}",
        f"--node-rank={task.index}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host_port(head.address, gang.rendezvous_port)}",
        f"--rdzv-id={gang.job_id}",
        f"--rdzv-conf=is_host={1 if task.index == 0 else 0}",
        f"--local-addr={torchrun_local_addr(gang, task)}",
        *torchrun_program(command),
    )


def torchrun_local_addr(gang: Gang, task: GangTask) -> str:
    """The address torchrun names its node by. Its rendezvous tells nodes apart by (address,
    pid), and a sandbox's torchrun always has the same pid: tasks whose nodes share one
    loopback address (a pool on one machine) each get one of their own in 127.0.0.0/8."""
    sharing = [t for t in gang.tasks if t.address == task.address]
    try:
        loopback = ipaddress.ip_address(task.address).is_loopback
    except ValueError:
        loopback = False
    if len(sharing) == 1 or not loopback or task.index == 0:
        return task.address
    return f"127.0.0.{task.index + 1}"


def torchrun_program(command: Sequence[str]) -> list[str]:
    """The user's command as torchrun's trailing arguments.

    The user writes the command as they would run one process:

    * ``python train.py ARGS`` -> ``train.py ARGS`` (torchrun runs it with its Python);
    * ``python -m pkg.mod ARGS`` -> ``-m pkg.mod ARGS``;
    * ``train.py ARGS`` (a script ending in .py) -> as given;
    * anything else (``python -u train.py``, ``bash run.sh``, ``./a.out``) -> ``--no-python``
      then the command as given: torchrun runs it directly, with the same variables.
    """
    first, rest = PurePosixPath(command[0]).name, list(command[1:])
    if _PYTHON.match(first) and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return rest
        if not rest[0].startswith("-"):
            return rest
    elif command[0].endswith(".py"):
        return list(command)
    return ["--no-python", *command]


def _per_gpu_task(gang: Gang, task: GangTask, command: Sequence[str]) -> TaskLaunch:
    processes = []
    pet = pet_env(gang, task, task.process_count)
    for local_rank in range(task.process_count):
        env = {**gpupool_env(gang, task), **torch_env(gang, task, local_rank), **pet}
        processes.append(
            ProcessSpec(
                argv=tuple(command),
                env=env,
                env_defaults=torch_env_defaults(task),
                rank=int(env["RANK"]),
                local_rank=local_rank,
            )
        )
    return TaskLaunch(task_index=task.index, node=task.node, processes=tuple(processes))


def _torchrun_task(gang: Gang, task: GangTask, command: Sequence[str]) -> TaskLaunch:
    process = ProcessSpec(
        argv=torchrun_argv(gang, task, command),
        # torchrun gives its workers the rest; its own options win over the PET_* it reads
        env={**gpupool_env(gang, task), **pet_env(gang, task, task.process_count)},
    )
    return TaskLaunch(task_index=task.index, node=task.node, processes=(process,))


def _per_node_task(
    gang: Gang, task: GangTask, command: Sequence[str], procs_per_node: int | None
) -> TaskLaunch:
    """The command as is, as a PyTorchJob's pod runs it; PYTHONUNBUFFERED=1 as the operator
    sets it, unless the job says otherwise."""
    process = ProcessSpec(
        argv=tuple(command),
        env={**gpupool_env(gang, task), **per_node_env(gang, task, procs_per_node)},
        env_defaults={"PYTHONUNBUFFERED": "1"},
    )  # no rank: its ranks, if any, are the command's; its lines are labelled by task
    return TaskLaunch(task_index=task.index, node=task.node, processes=(process,))


# -- tensorflow ------------------------------------------------------------------------------


def tf_config(gang: Gang, task: GangTask, chief: bool = False) -> str:
    """``TF_CONFIG`` for MultiWorkerMirroredStrategy, as TensorFlow documents it
    (tf.distribute.cluster_resolver.TFConfigClusterResolver, "Multi-worker training"):
    ``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``,
    workers in task order. Task i listens on its own ``port``, or on rendezvous_port + i
    when the caller reserved a block of ports instead.

    ``chief``: task 0 is the chief and the others the workers 0, 1, ..., as TFJob's
    operator writes it for Chief and Worker replicas (training-operator release-1.9,
    pkg/controller.v1/tensorflow/tensorflow.go genTFConfigJSONStr, with its
    ``"environment": "cloud"``; no "worker" list without workers)."""
    addresses = [host_port(t.address, tf_port(gang, t)) for t in gang.tasks]
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"TensorFlow workers need distinct addresses: {addresses}")
    if not chief:
        config = {"cluster": {"worker": addresses}, "task": {"type": "worker", "index": task.index}}
        return json.dumps(config)
    cluster = {"chief": addresses[:1]} | ({"worker": addresses[1:]} if addresses[1:] else {})
    kind, index = ("chief", 0) if task.index == 0 else ("worker", task.index - 1)
    role = {"type": kind, "index": index}
    return json.dumps({"cluster": cluster, "task": role, "environment": "cloud"})


def tf_port(gang: Gang, task: GangTask) -> int:
    port = task.port if task.port is not None else gang.rendezvous_port + task.index
    if port > 65535:
        raise ValueError(f"task {task.index}'s TensorFlow port {port} is past 65535")
    return port


def _tensorflow_task(gang: Gang, task: GangTask, command: Sequence[str], chief: bool) -> TaskLaunch:
    env = {**gpupool_env(gang, task), "TF_CONFIG": tf_config(gang, task, chief)}
    process = ProcessSpec(argv=tuple(command), env=env, rank=task.index, local_rank=0)
    return TaskLaunch(task_index=task.index, node=task.node, processes=(process,))
