"""A gang's state from its tasks': running when all run, ended when all ended, the first
task to fail (in time) deciding its exit, a placeholder stopped after the end not a failure."""

from __future__ import annotations

from gpupool.executors.gang import combined
from gpupool.executors.task import Observed, PollResult

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
