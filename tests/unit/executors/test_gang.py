"""A gang of tasks (``executors.gang``): its state from its tasks', and how an executor plans an
MPI gang."""

from __future__ import annotations

import json

from gpupool.executors.gang import combined, planned
from gpupool.executors.task import Observed, PollResult, TaskSpec
from tests.support.tasks import task

RUNNING = PollResult(Observed.RUNNING, started_at=10.0)


def exited(code: int, at: float) -> PollResult:
    return PollResult(Observed.EXITED, exit_code=code, started_at=10.0, ended_at=at)


def test_a_gang_runs_while_its_tasks_run_and_succeeds_when_all_exit_0() -> None:
    assert combined([RUNNING, RUNNING], [True, True]) == (RUNNING, False)
    result, stop_rest = combined([exited(0, 20.0), exited(0, 21.0)], [True, True])
    assert (result.observed, result.exit_code, result.ended_at, stop_rest) == (
        Observed.EXITED,
        0,
        21.0,
        False,
    )


def test_the_first_task_to_fail_decides_and_the_others_are_stopped() -> None:
    result, stop_rest = combined([RUNNING, exited(3, 20.0)], [True, True])
    assert result.observed == Observed.RUNNING and stop_rest
    result, _ = combined([exited(143, 21.0), exited(3, 20.0)], [True, True])
    assert result.exit_code == 3 and result.message.startswith("task 1:")


def test_a_lost_task_loses_the_gang() -> None:
    lost = PollResult(Observed.LOST, started_at=10.0, ended_at=20.0, message="node n2 was lost")
    result, _ = combined([exited(143, 25.0), lost], [True, True])
    assert result.observed == Observed.LOST and "node n2 was lost" in result.message


def test_a_placeholder_stopped_after_the_deciding_task_ended_is_no_failure() -> None:
    result, stop_rest = combined([exited(0, 20.0), RUNNING], [True, False])
    assert stop_rest  # the placeholder is stopped now
    result, _ = combined([exited(0, 20.0), exited(137, 22.0)], [True, False])
    assert (result.observed, result.exit_code) == (Observed.EXITED, 0)


# -- an MPI gang's plan ----------------------------------------------------------------------------


# How an executor plans an MPI gang (``executors.gang.planned``): gpupool's own rsh agent
# with the runner's Python, a service on each other task at the port its node gave, and a
# secret of the attempt's own.

PYTHON = "/opt/venv/bin/python3"
AGENT = f"{PYTHON} -m gpupool.runner.mpi_exec rsh"


def mpi_gang(address: str = "127.0.0.1") -> list[TaskSpec]:
    return [
        task(
            ["./a.out"],
            node=f"n{i}",
            node_address=address,
            task_index=i,
            task_count=3,
            launcher="mpi",
        )
        for i in range(3)
    ]


def test_task_0_runs_mpirun_through_the_agent_and_the_others_serve_it() -> None:
    plans = [t.launch for t in planned(mpi_gang(), 29500, [4100, 4101, 4102], python=PYTHON)]
    argv = plans[0]["processes"][0]["argv"]
    assert argv[argv.index("plm_rsh_agent") + 1] == AGENT
    assert "plm_rsh_no_tree_spawn" not in argv
    for plan in plans[1:]:
        assert plan["processes"][0]["argv"] == [PYTHON, "-m", "gpupool.runner.mpi_exec", "serve"]
        assert plan["decides_exit"] is False
    envs = [plan["processes"][0]["env"] for plan in plans]
    hosts = {"gpupool-task-1": "127.0.0.1:4101", "gpupool-task-2": "127.0.0.1:4102"}
    assert all(json.loads(env["GPUPOOL_MPI_HOSTS"]) == hosts for env in envs)
    assert [env.get("GPUPOOL_MPI_LISTEN") for env in envs] == [None, *hosts.values()]
    assert plans[0]["processes"][0]["env_defaults"]["OMPI_MCA_oob_tcp_if_include"] == "lo"


def test_each_attempt_gets_a_secret_of_its_own_shared_by_its_tasks() -> None:
    attempts = [planned(mpi_gang("10.0.0.1"), 29500, python=PYTHON) for _ in range(2)]
    secrets = [{t.launch["processes"][0]["env"]["GPUPOOL_MPI_SECRET"] for t in a} for a in attempts]
    assert [len(s) for s in secrets] == [1, 1]
    assert secrets[0] != secrets[1]
    assert len(next(iter(secrets[0]))) >= 32
    head = attempts[0][0].launch["processes"][0]
    assert head["env_defaults"] == {}  # not on loopback: Open MPI picks its interfaces
