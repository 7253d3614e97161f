"""A real MPI job over three tasks on 127.0.0.1, each under the real runner (unsandboxed, and
in its sandbox as the job's account), launched as the executor plans it: task 0's mpirun
starts the daemons of tasks 1 and 2 through gpupool's rsh agent (gpupool.runner.mpi_exec),
which those tasks serve; no ssh. The ranks run in their own task, with its environment."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_harness import PYTHON, RunnerHarness, bwrap, sandbox_policy
from tests.support.distributed import (
    EXAMPLES,
    MPI_EXAMPLE,
    needs_open_mpi,
    open_mpi_loopback_env,
    parse_allreduce,
)
from tests.support.server import free_port

import gpupool
from gpupool.domain.launchers import (
    Gang,
    GangTask,
    Launcher,
    LauncherKind,
    LauncherMode,
    plan_launch,
)
from gpupool.executors.gang import mpi_agent

PACKAGE_ROOT = str(Path(gpupool.__file__).resolve().parents[1])  # shown in the sandboxes
TASKS = 3
HANG_GUARD_S = 240  # ends a hung launch; says nothing about speed
# each rank says where it runs, then joins the allreduce
RANK = 'echo "rank $OMPI_COMM_WORLD_RANK task $GPUPOOL_TASK_INDEX"; exec "$0" "$1"'


@pytest.fixture(params=["direct", "sandbox"])
def tasks(request: pytest.FixtureRequest) -> Iterator[list[RunnerHarness]]:
    """One runner harness per task; ``sandbox``: each task in its own sandbox (as root,
    under the account ``nobody``), as the node agents start a gang's tasks."""
    sandboxed = request.param == "sandbox"
    if sandboxed and bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed: make test installs it as root")
    harnesses = [RunnerHarness(sandboxed=sandboxed) for _ in range(TASKS)]
    yield harnesses
    for harness in harnesses:
        harness.cleanup()


@needs_open_mpi
@pytest.mark.parametrize("mode", [None, "mpirun"])
def test_mpirun_reaches_the_other_tasks_through_gpupools_agent(
    tasks: list[RunnerHarness], mode: str | None
) -> None:
    """By default gpupool writes the mpirun line; in mode mpirun (an MPIJob Launcher's
    command) the user's own mpirun finds the hostfile and the agent in its MCA variables."""
    command = ["sh", "-c", RANK, PYTHON, str(MPI_EXAMPLE)]
    if mode == "mpirun":
        command = ["mpirun", "-n", str(TASKS), *command]
    launches = plan(command, mode)
    runners = [spawn(harness, launch) for harness, launch in zip(tasks, launches, strict=True)]
    head = tasks[0]
    assert head.wait_for_exit(runners[0], timeout=HANG_GUARD_S) == 0
    assert head.state()["exit_code"] == 0, head.log() + tasks[1].log() + tasks[2].log()
    log = head.log()
    assert parse_allreduce(log) == (1 + 2 + 3, 3), log
    placed = sorted(line for line in log.splitlines() if line.startswith("rank "))
    assert placed == ["rank 0 task 0", "rank 1 task 1", "rank 2 task 2"], log
    for harness, runner in zip(tasks[1:], runners[1:], strict=True):
        runner.send_signal(signal.SIGTERM)  # as the executor stops the serving tasks
        assert harness.wait_for_exit(runner) == 0
        assert harness.state()["exit_code"] == 0, harness.log()


def plan(command: list[str], mode: str | None = None) -> list[dict[str, object]]:
    """The launch of each task as the executor writes it, all tasks on 127.0.0.1."""
    gang = Gang(
        job_id="job-7",
        tasks=tuple(
            GangTask(index=i, node=f"n{i}", address="127.0.0.1", port=free_port())
            for i in range(TASKS)
        ),
        rendezvous_port=free_port(),
    )
    mpi = Launcher(kind=LauncherKind.MPI, mode=LauncherMode(mode) if mode else None)
    return [t.model_dump(mode="json") for t in plan_launch(gang, mpi, command, mpi_agent(PYTHON))]


def spawn(harness: RunnerHarness, launch: dict[str, object]):  # noqa: ANN201 - the runner's Popen
    """The task's runner on its plan, in its working directory, as the executor starts it."""
    plan_file = harness.work / "plan.json"
    plan_file.write_text(json.dumps(launch))
    plan_file.chmod(0o644)
    command = [PYTHON, "-m", "gpupool.runner.ranks", str(plan_file)]
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    spec: dict[str, object] = {"workdir": str(harness.work), "env": env}
    if harness.sandboxed:
        policy = sandbox_policy(harness.root)
        spec["sandbox"] = {**policy, "readonly": [*policy["readonly"], PACKAGE_ROOT, str(EXAMPLES)]}
    else:
        # a /tmp of its own, as its sandbox (or its own machine) gives it: daemons of several
        # tasks creating their session directories in one /tmp at once race (Open MPI 4.1
        # fails one with "mkdir ... File exists")
        (tmp := harness.root / "tmp").mkdir(mode=0o1777)
        env["TMPDIR"] = str(tmp)
    if not harness.sandboxed and os.geteuid() == 0:  # Open MPI wants root to say it is meant
        env |= {k: v for k, v in open_mpi_loopback_env().items() if "ROOT" in k}
    harness.write_spec(command, **spec)
    return harness.spawn()
