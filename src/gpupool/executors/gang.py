"""A job over several nodes (a gang), as executors launch and watch it.

``planned`` turns the tasks of one attempt into what each starts (``domain.launchers``):
torch's variables and one process per GPU (or per procs_per_node), torchrun, the command as
is per node, TF_CONFIG, or mpirun on the first task.
``combined`` reads the gang's state from its tasks' states: it runs when all run, and it ends
once every task has ended; the first task to fail decides its exit (the others are then
stopped by the executor), a lost task makes it lost. ``GangLog`` merges the tasks' logs into
the attempt's log, whole lines each, labelled by rank or task.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import replace
from typing import Any

from gpupool.domain.launchers import (
    Gang,
    GangTask,
    MpiAgent,
    ProcessSpec,
    TaskLaunch,
    gpupool_env,
    parse_launcher,
    plan_launch,
)
from gpupool.executors.task import Observed, PollResult, TaskSpec

MPI_EXEC = "gpupool.runner.mpi_exec"  # the rsh agent and its service, in every task's sandbox


def planned(
    tasks: list[TaskSpec],
    rendezvous_port: int,
    ports: list[int] | None = None,
    python: str = sys.executable,
) -> list[TaskSpec]:
    """``tasks`` (one attempt's, in task order) with what each starts and its variables.

    ``ports``: one per task, free on its node (an MPI task serves the rsh agent there);
    without them task i uses rendezvous_port + i. ``python``: the interpreter that runs
    gpupool's runner in the sandbox (the MPI agent runs with it).
    """
    first = tasks[0]
    gang = Gang(
        job_id=str(first.job_id),
        tasks=tuple(
            GangTask(
                index=t.task_index,
                node=t.node,
                address=t.node_address,
                gpus=_gpus(t),
                gpu_indices=t.gpu_indices if _gpus(t) else (),
                port=ports[i] if ports else None,
            )
            for i, t in enumerate(tasks)
        ),
        rendezvous_port=rendezvous_port,
    )
    launches = _launches(gang, first, python)
    return [
        replace(task, launch=launch.model_dump(mode="json") | {"fence": fenced(gang, placed)})
        for task, launch, placed in zip(tasks, launches, gang.tasks, strict=True)
    ]


def fenced(gang: Gang, task: GangTask) -> dict[str, Any]:
    """What the fence of ``task``'s node keeps to the gang (``executors.fence``): the ports
    the task serves the gang there (the rendezvous on task 0's node, its own port where it
    has one: an MPI agent's) and the addresses of the gang's nodes."""
    ports = [gang.rendezvous_port] if task.index == 0 else []
    if task.port is not None and task.port not in ports:
        ports.append(task.port)
    return {"rendezvous": ports, "peers": sorted({t.address for t in gang.tasks})}


def _launches(gang: Gang, first: TaskSpec, python: str) -> tuple[TaskLaunch, ...]:
    if first.launcher is None:  # the command as is, on every task, told where it stands
        return tuple(
            TaskLaunch(
                task_index=t.index,
                node=t.node,
                processes=(ProcessSpec(argv=tuple(first.command), env=gpupool_env(gang, t)),),
            )
            for t in gang.tasks
        )
    launcher = parse_launcher(first.launcher, first.launcher_mode, first.procs_per_node)
    mpi = mpi_agent(python) if launcher.kind == "mpi" else None
    return plan_launch(gang, launcher, first.command, mpi)


def mpi_agent(python: str) -> MpiAgent:
    """gpupool's rsh agent for one attempt: a fresh secret each, so that a task's service
    runs only its own attempt's daemons."""
    return MpiAgent(
        argv=(python, "-m", MPI_EXEC, "rsh"),
        wait_argv=(python, "-m", MPI_EXEC, "serve"),
        secret=secrets.token_hex(16),
    )


def _gpus(task: TaskSpec) -> float:
    if not task.gpu_grants:
        return 0.0
    if len(task.gpu_grants) == 1 and task.gpu_grants[0].share < 1:
        return task.gpu_grants[0].share
    return float(len(task.gpu_grants))


def deciding(task: TaskSpec) -> bool:
    """Whether the task's end decides the gang's (an MPI placeholder's does not)."""
    return launch_decides(task.launch or {})


def label(task: TaskSpec) -> str:
    """How the task's lines are labelled in the attempt's log: by its rank when it runs one
    process of a rank, none when it runs several (the rank launcher labels them), else by
    its task."""
    return launch_label(task.launch or {}, task.task_index)


def launch_decides(launch: dict[str, Any]) -> bool:
    """``deciding``, from a task's launch plan (as written on its node)."""
    return bool(launch.get("decides_exit", True))


def launch_label(launch: dict[str, Any], task_index: int) -> str:
    """``label``, from a task's launch plan (as written on its node)."""
    processes = launch.get("processes") or []
    if len(processes) > 1:
        return ""
    if len(processes) == 1 and processes[0].get("rank") is not None:
        return f"[rank {processes[0]['rank']}] "
    return f"[task {task_index}] "


def launch_count(launch: dict[str, Any]) -> int:
    """How many tasks the gang of a task's launch plan has (1: not a gang's)."""
    processes = launch.get("processes") or [{}]
    try:
        return int((processes[0].get("env") or {}).get("GPUPOOL_TASK_COUNT", 1))
    except (TypeError, ValueError):
        return 1


def combined(results: list[PollResult], deciders: list[bool]) -> tuple[PollResult, bool]:
    """The gang's state from its tasks' (in task order), and whether its other tasks must be
    stopped now (one failed or was lost, or every deciding task has ended)."""
    ended = [r.observed in (Observed.EXITED, Observed.LOST) for r in results]
    started = [r.started_at for r in results if r.started_at is not None]
    started_at = min(started) if started else None
    decided = all(e for e, d in zip(ended, deciders, strict=True) if d)
    failures = [
        (i, r)
        for i, r in enumerate(results)
        if (r.observed == Observed.LOST or (r.observed == Observed.EXITED and r.exit_code))
        # a placeholder stopped once the deciding tasks ended did not fail the job
        and (deciders[i] or not decided or r.observed == Observed.LOST)
    ]
    # the first to fail in time decides: the others may have failed because it was stopped
    failed = min(failures, key=lambda f: f[1].ended_at or float("inf"), default=None)
    stop_rest = failed is not None or decided
    if not all(ended):
        if any(r.observed == Observed.ORPHANED for r in results):
            orphan = next(r for r in results if r.observed == Observed.ORPHANED)
            return replace(orphan, started_at=started_at), stop_rest
        running = all(r.observed != Observed.STARTING for r in results)
        observed = Observed.RUNNING if running else Observed.STARTING
        return PollResult(observed, started_at=started_at), stop_rest
    if failed is not None:
        index, result = failed
        message = f"task {index}: {result.message or f'exited with code {result.exit_code}'}"
        return replace(result, started_at=started_at, message=message), False
    ends = [r.ended_at for r in results if r.ended_at is not None]
    return (
        PollResult(
            Observed.EXITED,
            exit_code=0,
            started_at=started_at,
            ended_at=max(ends) if ends else None,
        ),
        False,
    )


class GangLog:
    """Appends the new bytes of each task's log to the attempt's log, whole lines only,
    each with its task's label (a line cut by a copy is held until its end arrives)."""

    def __init__(self, labels: list[str]) -> None:
        self.labels = [label.encode() for label in labels]
        self.pending = [b""] * len(labels)

    def feed(self, task: int, data: bytes) -> bytes:
        text = self.pending[task] + data
        cut = text.rfind(b"\n") + 1
        whole, self.pending[task] = text[:cut], text[cut:]
        return self._labelled(task, whole)

    def flush(self, task: int) -> bytes:
        """The task's unfinished last line, ended (the task has ended)."""
        rest, self.pending[task] = self.pending[task], b""
        return self._labelled(task, rest + b"\n") if rest else b""

    def _labelled(self, task: int, whole: bytes) -> bytes:
        label = self.labels[task]
        if not label or not whole:
            return whole
        return b"".join(label + line for line in whole.splitlines(keepends=True))
