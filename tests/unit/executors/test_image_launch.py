"""A gang's task in an image runs its launch plan's one process as it is (the rank launcher
needs the host's Python, which an image lacks), with the plan's env over the job's and its
defaults under both; a plan only the launcher can run is refused, saying what to do."""

from __future__ import annotations

import pytest

from gpupool.executors.images import ImageError, launched_in_image


def test_the_plans_one_process_runs_with_its_env_over_the_jobs() -> None:
    plan = {
        "processes": [
            {
                "argv": ["sh", "-c", "echo $GPUPOOL_TASK_INDEX"],
                "env": {"GPUPOOL_TASK_INDEX": "1", "MASTER_PORT": "2950"},
                "env_defaults": {"NCCL_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
                "rank": None,
            }
        ],
        "files": {},
        "fence": {"peers": []},
    }
    env = {"PATH": "/bin", "MASTER_PORT": "1", "OMP_NUM_THREADS": "8"}

    command = launched_in_image(plan, env)

    assert command == ["sh", "-c", "echo $GPUPOOL_TASK_INDEX"]
    assert env == {
        "PATH": "/bin",
        "GPUPOOL_TASK_INDEX": "1",
        "MASTER_PORT": "2950",  # the plan's, over the job's
        "OMP_NUM_THREADS": "8",  # the job's, over the plan's default
        "NCCL_SOCKET_IFNAME": "lo",
    }


@pytest.mark.parametrize(
    "plan",
    [
        {"processes": [{"argv": ["a"]}, {"argv": ["b"]}]},
        {"processes": [{"argv": ["a"]}], "files": {"hostfile": "n1 slots=1\n"}},
        {"processes": []},
    ],
)
def test_a_plan_only_the_launcher_runs_is_refused(plan: dict) -> None:
    with pytest.raises(ImageError, match="run one process per node"):
        launched_in_image(plan, {})
