"""How the processes of a distributed job start: per task, the commands and environments.

The caller (the executor) hands in the gang's layout -- its tasks in order, each with its
node, the address the other nodes reach that node at and its GPUs -- a rendezvous port it
reserved on task 0's node, the job's launcher and the user's command. :func:`plan_launch`
answers, per task, the processes to start (argv, environment, rank) and the files to write
into the task's working directory first. Every process gets ``GPUPOOL_NODE``,
``GPUPOOL_TASK_INDEX`` and ``GPUPOOL_TASK_COUNT``. GPU pinning stays the executor's:
every process of a task sees all of the task's GPUs (``CUDA_VISIBLE_DEVICES``), and a rank
picks its own with ``LOCAL_RANK``, as under torchrun.

Launchers:

* ``torch``, mode ``per-gpu`` (the default): one process per GPU of the task (one for a
  CPU-only or fractional task), each with the variables torchrun gives its workers.
  Mode ``torchrun``: one ``torchrun`` per task, with the c10d rendezvous at task 0.
* ``tensorflow``: one process per task with ``TF_CONFIG`` for MultiWorkerMirroredStrategy.
* ``mpi``: task 0 runs ``mpirun`` over a hostfile of all tasks; it starts the remote
  daemons through an rsh agent (see :class:`MpiAgent`), which the other tasks serve.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpupool.errors import InvalidLauncher

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
MPI_ALIAS_PREFIX = "gpupool-task-"
_MPI_ALIAS = re.compile(rf"^{MPI_ALIAS_PREFIX}(\d+)$")


class LauncherKind(StrEnum):
    TORCH = "torch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"


class TorchMode(StrEnum):
    PER_GPU = "per-gpu"  # gpupool starts one process per GPU with torchrun's variables
    TORCHRUN = "torchrun"  # gpupool starts torchrun, which starts the processes


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Launcher(_Frozen):
    """A job's launcher; build it from user input with :func:`parse_launcher`."""

    kind: LauncherKind
    mode: TorchMode | None = None  # torch only; None means per-gpu

    @model_validator(mode="after")
    def _mode_is_for_torch(self) -> Launcher:
        if self.mode is not None and self.kind is not LauncherKind.TORCH:
            raise ValueError(f"launcher {self.kind} has no modes (only torch has)")
        return self


class GangTask(_Frozen):
    """One task of a gang as placed: where it runs and which GPUs it holds there."""

    index: int = Field(ge=0)
    node: str = Field(min_length=1)
    address: str = Field(min_length=1)  # the node's address as the other nodes reach it
    gpus: float = Field(default=0, ge=0)  # GPUs of the task: whole, or one fraction below 1
    gpu_indices: tuple[int, ...] = ()  # their local indices on the node
    port: int | None = Field(default=None, ge=1, le=65535)  # reserved for this task (TF)

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
        """Ranks of this task: one per whole GPU, else one."""
        return int(self.gpus) if self.gpus >= 1 else 1


class Gang(_Frozen):
    """A distributed job's tasks as placed, in task order, and its rendezvous port."""

    job_id: str = Field(min_length=1)
    tasks: tuple[GangTask, ...] = Field(min_length=1)
    rendezvous_port: int = Field(ge=1, le=65535)  # free on task 0's node, chosen by the caller

    @model_validator(mode="after")
    def _tasks_in_order(self) -> Gang:
        if [task.index for task in self.tasks] != list(range(len(self.tasks))):
            raise ValueError("the tasks are indexed 0, 1, ... in order")
        return self


class MpiAgent(_Frozen):
    """How task 0's ``mpirun`` reaches the other tasks (Open MPI's ``plm_rsh_agent``).

    mpirun runs the agent as it would ssh: ``<argv...> <alias> <words...>``, where alias is
    a hostfile name (``gpupool-task-<index>``: tasks may share a host, so names are per
    task; :func:`mpi_task_index` reads one back) and the words are the daemon's command.
    The agent must, like ssh, join the words with spaces and run them with ``/bin/sh -c``
    inside that task's sandbox, with that task's environment. mpirun splits the agent
    string on spaces, so ``argv`` words hold none.

    gpupool's agent is ``gpupool.runner.mpi_exec``: the other tasks serve it (``wait_argv``)
    on their own port, and every task gets (:func:`mpi_env`) ``GPUPOOL_MPI_SECRET``, the
    ``GPUPOOL_MPI_HOSTS`` of the serving tasks and, serving, its ``GPUPOOL_MPI_LISTEN``.
    """

    argv: tuple[str, ...] = Field(min_length=1)  # e.g. ("python", "-m", "...mpi_exec", "rsh")
    hostfile: str = "gpupool-hostfile"  # written in task 0's working directory
    # what the other tasks run meanwhile: the agent's service, which starts the daemon in
    # their sandbox; the gang's exit is task 0's (TaskLaunch.decides_exit), the executor
    # then stops them
    wait_argv: tuple[str, ...] = Field(default=("sleep", "infinity"), min_length=1)
    secret: str = Field(min_length=16)  # the attempt's, fresh for each: the agent's password

    @model_validator(mode="after")
    def _words_without_spaces(self) -> MpiAgent:
        if any(not word or any(c.isspace() for c in word) for word in self.argv):
            raise ValueError("the rsh agent's words cannot be empty or hold spaces")
        path = PurePosixPath(self.hostfile)
        if path.is_absolute() or ".." in path.parts or not self.hostfile.strip():
            raise ValueError("the hostfile is a path inside the task's working directory")
        return self


class ProcessSpec(_Frozen):
    """One process to start: ``env`` goes over the job's own environment, ``env_defaults``
    only where the job's environment lacks the variable."""

    argv: tuple[str, ...]
    env: dict[str, str]
    env_defaults: dict[str, str] = Field(default_factory=dict)
    rank: int | None = None  # the global rank (log prefixes); None for a placeholder
    local_rank: int | None = None


class TaskLaunch(_Frozen):
    """What one task starts, and the files to write into its working directory first."""

    task_index: int
    node: str
    processes: tuple[ProcessSpec, ...]
    files: dict[str, str] = Field(default_factory=dict)  # relative path -> content
    decides_exit: bool = True  # False: a placeholder, stopped when the deciding tasks end


def parse_launcher(kind: str, mode: str | None = None) -> Launcher:
    """The launcher a user named; InvalidLauncher saying what is accepted otherwise."""
    kinds = ", ".join(k.value for k in LauncherKind)
    if kind not in LauncherKind.__members__.values():
        raise InvalidLauncher(f"unknown launcher '{kind}': use one of {kinds}", field="launcher")
    if mode is not None and kind != LauncherKind.TORCH:
        raise InvalidLauncher(f"launcher {kind} has no modes: leave the mode out", field="mode")
    modes = ", ".join(m.value for m in TorchMode)
    if mode is not None and mode not in TorchMode.__members__.values():
        raise InvalidLauncher(f"unknown torch mode '{mode}': use one of {modes}", field="mode")
    return Launcher(kind=LauncherKind(kind), mode=TorchMode(mode) if mode else None)


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


def plan_launch(
    gang: Gang, launcher: Launcher, command: Sequence[str], mpi: MpiAgent | None = None
) -> tuple[TaskLaunch, ...]:
    """Per task of ``gang``, in task order, what to start. ``mpi`` is required for MPI."""
    for task in gang.tasks:
        check_request(launcher, task.gpus, command)
    if launcher.kind is LauncherKind.TENSORFLOW:
        return tuple(_tensorflow_task(gang, task, command) for task in gang.tasks)
    if launcher.kind is LauncherKind.MPI:
        if mpi is None:
            raise ValueError("an MPI launch needs the rsh agent (MpiAgent)")
        return tuple(_mpi_task(gang, task, command, mpi) for task in gang.tasks)
    if launcher.mode is TorchMode.TORCHRUN:
        return tuple(_torchrun_task(gang, task, command) for task in gang.tasks)
    return tuple(_per_gpu_task(gang, task, command) for task in gang.tasks)


def gpupool_env(gang: Gang, task: GangTask) -> dict[str, str]:
    """What every process of every launcher gets."""
    return {
        "GPUPOOL_NODE": task.node,
        "GPUPOOL_TASK_INDEX": str(task.index),
        "GPUPOOL_TASK_COUNT": str(len(gang.tasks)),
    }


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
    offset = sum(t.process_count for t in gang.tasks[: task.index])
    world = sum(t.process_count for t in gang.tasks)
    rank = offset + local_rank
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
    for local_rank in range(task.process_count):
        env = {**gpupool_env(gang, task), **torch_env(gang, task, local_rank)}
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
        env=gpupool_env(gang, task),  # torchrun gives its workers the rest
    )
    return TaskLaunch(task_index=task.index, node=task.node, processes=(process,))


# -- tensorflow ------------------------------------------------------------------------------


def tf_config(gang: Gang, task: GangTask) -> str:
    """``TF_CONFIG`` for MultiWorkerMirroredStrategy, as TensorFlow documents it
    (tf.distribute.cluster_resolver.TFConfigClusterResolver, "Multi-worker training"):
    ``{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": i}}``,
    workers in task order. Task i listens on its own ``port``, or on rendezvous_port + i
    when the caller reserved a block of ports instead."""
    workers = [host_port(t.address, tf_port(gang, t)) for t in gang.tasks]
    if len(set(workers)) != len(workers):
        raise ValueError(f"TensorFlow workers need distinct addresses: {workers}")
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": task.index}}
    return json.dumps(config)


def tf_port(gang: Gang, task: GangTask) -> int:
    port = task.port if task.port is not None else gang.rendezvous_port + task.index
    if port > 65535:
        raise ValueError(f"task {task.index}'s TensorFlow port {port} is past 65535")
    return port


def _tensorflow_task(gang: Gang, task: GangTask, command: Sequence[str]) -> TaskLaunch:
    env = {**gpupool_env(gang, task), "TF_CONFIG": tf_config(gang, task)}
    process = ProcessSpec(argv=tuple(command), env=env, rank=task.index, local_rank=0)
    return TaskLaunch(task_index=task.index, node=task.node, processes=(process,))


# -- mpi -------------------------------------------------------------------------------------


def mpi_alias(index: int) -> str:
    """The hostfile name of task ``index`` (host names alone would merge tasks that share a
    host, as several Ray nodes on 127.0.0.1 do)."""
    return f"{MPI_ALIAS_PREFIX}{index}"


def mpi_task_index(alias: str) -> int | None:
    """The task an alias names (for the rsh agent); None for a name that is no alias."""
    match = _MPI_ALIAS.match(alias)
    return int(match.group(1)) if match else None


def mpi_hostfile(gang: Gang) -> str:
    """Open MPI's hostfile syntax, one line a task: ``<alias> slots=<ranks>``."""
    return "".join(f"{mpi_alias(t.index)} slots={t.process_count}\n" for t in gang.tasks)


def mpirun_argv(gang: Gang, command: Sequence[str], mpi: MpiAgent) -> tuple[str, ...]:
    """Task 0's ``mpirun`` (Open MPI 4.x, mpirun(1) and its MCA parameters): every task's
    ranks from the hostfile, remote daemons through the agent. Tree spawn stays on (every
    task's sandbox has the agent and its variables, so daemons may start each other):
    ``plm_rsh_no_tree_spawn`` would have the daemons daemonize, out of the sandbox."""
    ranks = sum(t.process_count for t in gang.tasks)
    return (
        "mpirun",
        "--hostfile",
        mpi.hostfile,
        "-np",
        str(ranks),
        "--mca",
        "plm_rsh_agent",
        " ".join(mpi.argv),
        *command,
    )


def mpi_env(gang: Gang, task: GangTask, mpi: MpiAgent) -> dict[str, str]:
    """What the agent and its service read (see ``gpupool.runner.mpi_exec``): the secret,
    where each serving task (1, 2, ...) listens, and where this one does."""
    hosts = {mpi_alias(t.index): mpi_listen(gang, t) for t in gang.tasks[1:]}
    if len(set(hosts.values())) != len(hosts):
        raise ValueError(f"the MPI tasks need distinct addresses to serve on: {hosts}")
    env = {"GPUPOOL_MPI_SECRET": mpi.secret, "GPUPOOL_MPI_HOSTS": json.dumps(hosts)}
    if task.index != 0:
        env["GPUPOOL_MPI_LISTEN"] = hosts[mpi_alias(task.index)]
    return env


def mpi_listen(gang: Gang, task: GangTask) -> str:
    """Where task ``task`` serves the agent: its own ``port``, else rendezvous_port + index."""
    port = task.port if task.port is not None else gang.rendezvous_port + task.index
    if port > 65535:
        raise ValueError(f"task {task.index}'s MPI port {port} is past 65535")
    return host_port(task.address, port)


def mpi_loopback_env(gang: Gang) -> dict[str, str]:
    """For a gang all on loopback (a pool on one machine): Open MPI's TCP transport and its
    daemons' channel leave 127.0.0.0/8 out unless told to keep to ``lo``. mpirun passes
    them on to the daemons (as ``-mca`` words), the daemons to their ranks."""
    if not all(_is_loopback(t.address) for t in gang.tasks):
        return {}
    return {"OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}


def _mpi_task(gang: Gang, task: GangTask, command: Sequence[str], mpi: MpiAgent) -> TaskLaunch:
    env = {**gpupool_env(gang, task), **mpi_env(gang, task, mpi)}
    if task.index != 0:
        process = ProcessSpec(argv=mpi.wait_argv, env=env)
        return TaskLaunch(
            task_index=task.index, node=task.node, processes=(process,), decides_exit=False
        )
    process = ProcessSpec(  # all ranks' output; a job's own Open MPI settings win
        argv=mpirun_argv(gang, command, mpi), env=env, env_defaults=mpi_loopback_env(gang)
    )
    return TaskLaunch(
        task_index=0, node=task.node, processes=(process,), files={mpi.hostfile: mpi_hostfile(gang)}
    )


# -- helpers ---------------------------------------------------------------------------------


def _is_loopback(address: str) -> bool:
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
