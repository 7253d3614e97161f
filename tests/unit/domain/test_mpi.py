"""MPI's mode mpirun: the command is the mpirun line (an MPIJob Launcher's), run as given on
task 0 with Open MPI pointed at gpupool's hostfile and rsh agent through its MCA variables."""

from __future__ import annotations

import pytest

from gpupool.domain.gangs import Gang, GangTask
from gpupool.domain.launchers import Launcher, LauncherKind, LauncherMode, plan_launch
from gpupool.domain.mpi import MpiAgent, starts_mpirun
from gpupool.errors import InvalidLauncher

AGENT = MpiAgent(argv=("/usr/bin/python3", "-m", "mpi_exec", "rsh"), secret="s" * 32)
MPIRUN = Launcher(kind=LauncherKind.MPI, mode=LauncherMode.MPIRUN)
PI = ("mpirun", "-n", "4", "/home/mpiuser/pi")


def two_tasks(gpus: int = 2, address: str = "10.0.0.") -> Gang:
    tasks = tuple(
        GangTask(index=i, node=f"n{i}", address=f"{address}{i + 1}", gpus=gpus, gpu_indices=(0, 1))
        for i in range(2)
    )
    return Gang(job_id="job-9", tasks=tasks, rendezvous_port=29500)


def test_mpirun_mode_runs_the_command_as_given_on_task_0() -> None:
    head, other = plan_launch(two_tasks(), MPIRUN, PI, mpi=AGENT)
    assert head.processes[0].argv == PI
    assert head.files == {"gpupool-hostfile": "gpupool-task-0 slots=2\ngpupool-task-1 slots=2\n"}
    env = head.processes[0].env
    assert env["OMPI_MCA_orte_default_hostfile"] == "gpupool-hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == "/usr/bin/python3 -m mpi_exec rsh"
    assert env["K_MPI_JOB_ROLE"] == "launcher"
    assert other.processes[0].argv == AGENT.wait_argv and not other.decides_exit
    assert other.processes[0].env["K_MPI_JOB_ROLE"] == "worker"
    assert other.processes[0].env["GPUPOOL_MPI_LISTEN"] == "10.0.0.2:29501"


def test_mpirun_mode_slots_follow_procs_per_node_and_loopback_keeps_to_lo() -> None:
    launcher = MPIRUN.model_copy(update={"procs_per_node": 4})
    head = plan_launch(two_tasks(address="127.0.0."), launcher, PI, mpi=AGENT)[0]
    assert head.files["gpupool-hostfile"] == "gpupool-task-0 slots=4\ngpupool-task-1 slots=4\n"
    assert head.processes[0].env_defaults["OMPI_MCA_btl_tcp_if_include"] == "lo"


def test_the_default_mode_slots_follow_procs_per_node_too() -> None:
    launcher = Launcher(kind=LauncherKind.MPI, procs_per_node=1)
    head = plan_launch(two_tasks(), launcher, ["./a.out"], mpi=AGENT)[0]
    assert head.processes[0].argv[:5] == ("mpirun", "--hostfile", "gpupool-hostfile", "-np", "2")
    assert "OMPI_MCA_plm_rsh_agent" not in head.processes[0].env  # passed as --mca instead


@pytest.mark.parametrize(
    "command", [["mpirun", "-n", "2", "x"], ["/usr/bin/mpiexec", "x"], ["mpirun.openmpi", "x"]]
)
def test_commands_that_start_mpirun_are_recognised(command: list[str]) -> None:
    assert starts_mpirun(command)


def test_mpirun_mode_refuses_a_command_that_does_not_start_with_mpirun() -> None:
    with pytest.raises(InvalidLauncher, match="starts with mpirun") as caught:
        plan_launch(two_tasks(), MPIRUN, ["sh", "-c", "mpirun -n 2 x"], mpi=AGENT)
    assert caught.value.details == {"field": "command"}
