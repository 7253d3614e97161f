"""MPI launch plans: task 0 runs ``mpirun`` over a hostfile of all tasks, and Open MPI starts
the remote daemons through an rsh agent (:class:`MpiAgent`) that the other tasks serve.

Two modes: by default gpupool writes the ``mpirun`` line around the user's program
(:func:`mpirun_argv`); in mode ``mpirun`` the user's command is that line (``mpirun -n 2
/home/mpiuser/pi``, as an MPIJob's Launcher runs it) and runs as given, with Open MPI pointed
at gpupool's hostfile and agent through its MCA variables (:func:`mpirun_mode_env`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
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
    is_loopback,
)

MPI_ALIAS_PREFIX = "gpupool-task-"
_MPI_ALIAS = re.compile(rf"^{MPI_ALIAS_PREFIX}(\d+)$")
# what a command of mode mpirun starts with: Open MPI's names for its launcher (Debian's
# alternatives add a suffix: mpirun.openmpi)
MPIRUN = re.compile(r"^(mpirun|mpiexec|orterun)(\.[A-Za-z0-9_]+)?$")


class MpiAgent(Frozen):
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


def starts_mpirun(command: Sequence[str]) -> bool:
    """Whether ``command`` runs Open MPI's launcher itself (mode ``mpirun``)."""
    return bool(command) and bool(MPIRUN.match(PurePosixPath(command[0]).name))


def mpi_tasks(
    gang: Gang, command: Sequence[str], mpi: MpiAgent, as_given: bool = False
) -> tuple[TaskLaunch, ...]:
    """Per task, what it starts; ``as_given``: mode ``mpirun`` (the command is mpirun's)."""
    return tuple(_mpi_task(gang, task, command, mpi, as_given) for task in gang.tasks)


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
    return (
        "mpirun",
        "--hostfile",
        mpi.hostfile,
        "-np",
        str(gang.world_size),
        "--mca",
        "plm_rsh_agent",
        " ".join(mpi.argv),
        *command,
    )


def mpirun_mode_env(task: GangTask, mpi: MpiAgent) -> dict[str, str]:
    """What :func:`mpirun_argv` passes as arguments, as the MCA variables Open MPI 4.x reads
    (``OMPI_MCA_<parameter>``), for a command that runs mpirun itself: gpupool's hostfile
    (``orte_default_hostfile``, as MPIJob's launcher gets its own) and rsh agent. Its
    ``K_MPI_JOB_ROLE`` too (``launcher`` on task 0, else ``worker``), as MPIJob sets it."""
    return {
        "OMPI_MCA_orte_default_hostfile": mpi.hostfile,
        "OMPI_MCA_plm_rsh_agent": " ".join(mpi.argv),
        "K_MPI_JOB_ROLE": "launcher" if task.index == 0 else "worker",
    }


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
    if not all(is_loopback(t.address) for t in gang.tasks):
        return {}
    return {"OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}


def _mpi_task(
    gang: Gang, task: GangTask, command: Sequence[str], mpi: MpiAgent, as_given: bool
) -> TaskLaunch:
    env = {**gpupool_env(gang, task), **mpi_env(gang, task, mpi)}
    if as_given:
        env |= mpirun_mode_env(task, mpi)
    if task.index != 0:
        process = ProcessSpec(argv=mpi.wait_argv, env=env)
        return TaskLaunch(
            task_index=task.index, node=task.node, processes=(process,), decides_exit=False
        )
    argv = tuple(command) if as_given else mpirun_argv(gang, command, mpi)
    # all ranks' output; a job's own Open MPI settings win
    process = ProcessSpec(argv=argv, env=env, env_defaults=mpi_loopback_env(gang))
    return TaskLaunch(
        task_index=0, node=task.node, processes=(process,), files={mpi.hostfile: mpi_hostfile(gang)}
    )
