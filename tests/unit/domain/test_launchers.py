"""Launch plans of distributed jobs: torch (per GPU and torchrun), TensorFlow, MPI."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gpupool.domain.launchers import (
    Gang,
    GangTask,
    Launcher,
    LauncherKind,
    LauncherMode,
    MpiAgent,
    check_request,
    host_port,
    mpi_alias,
    mpi_hostfile,
    mpi_task_index,
    parse_launcher,
    plan_launch,
    tf_config,
    torchrun_program,
)
from gpupool.errors import InvalidLauncher

TORCH = Launcher(kind=LauncherKind.TORCH)
TORCHRUN = Launcher(kind=LauncherKind.TORCH, mode=LauncherMode.TORCHRUN)
TF = Launcher(kind=LauncherKind.TENSORFLOW)
MPI = Launcher(kind=LauncherKind.MPI)
SECRET = "0123456789abcdef0123456789abcdef"
AGENT = MpiAgent(argv=("/opt/gpupool/bin/gpupool-rsh", "--attempt", "a-7"), secret=SECRET)
TRAIN = ("python", "train.py", "--epochs", "3")


def task(index: int, gpus: float, node: str = "", address: str = "", **extra) -> GangTask:
    """A task on node-<index> at 10.0.0.<index+1> holding GPUs 0.. of its node."""
    count = 0 if gpus == 0 else max(1, int(gpus))
    return GangTask(
        index=index,
        node=node or f"node-{index}",
        address=address or f"10.0.0.{index + 1}",
        gpus=gpus,
        gpu_indices=tuple(range(count)),
        **extra,
    )


def gang(*tasks: GangTask, port: int = 29500) -> Gang:
    return Gang(job_id="job-42", tasks=tasks, rendezvous_port=port)


# -- torch, one process per GPU --------------------------------------------------------------


def test_per_gpu_gives_each_process_torchruns_variables() -> None:
    plan = plan_launch(gang(task(0, 2), task(1, 2)), TORCH, TRAIN)
    third = plan[1].processes[0]  # node-1's first GPU: global rank 2
    assert third.argv == TRAIN
    assert third.env == {
        "GPUPOOL_NODE": "node-1",
        "GPUPOOL_TASK_INDEX": "1",
        "GPUPOOL_TASK_COUNT": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "4",
        "RANK": "2",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "ROLE_NAME": "default",
        "ROLE_RANK": "2",
        "ROLE_WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "job-42",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29500",
        "PET_NPROC_PER_NODE": "2",
    }
    assert third.env_defaults == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "OMP_NUM_THREADS": "1"}
    assert (third.rank, third.local_rank) == (2, 0)


def test_per_gpu_ranks_count_up_across_tasks_of_different_sizes() -> None:
    plan = plan_launch(gang(task(0, 1), task(1, 4), task(2, 0)), TORCH, TRAIN)
    ranks = [[(p.rank, p.local_rank) for p in launch.processes] for launch in plan]
    assert ranks == [[(0, 0)], [(1, 0), (2, 1), (3, 2), (4, 3)], [(5, 0)]]
    assert {p.env["WORLD_SIZE"] for launch in plan for p in launch.processes} == {"6"}
    sizes = [launch.processes[0].env["LOCAL_WORLD_SIZE"] for launch in plan]
    assert sizes == ["1", "4", "1"]


def test_a_cpu_only_or_fractional_task_runs_one_process_without_omp_default() -> None:
    plan = plan_launch(gang(task(0, 0), task(1, 0.5)), TORCH, TRAIN)
    assert [len(launch.processes) for launch in plan] == [1, 1]
    assert plan[1].processes[0].env_defaults == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    assert all(launch.decides_exit and launch.files == {} for launch in plan)


def test_tasks_sharing_a_host_share_its_master_address() -> None:
    local = gang(task(0, 1, address="127.0.0.1"), task(1, 1, address="127.0.0.1"), port=41000)
    envs = [launch.processes[0].env for launch in plan_launch(local, TORCH, TRAIN)]
    assert {(env["MASTER_ADDR"], env["MASTER_PORT"]) for env in envs} == {("127.0.0.1", "41000")}
    assert [env["GPUPOOL_NODE"] for env in envs] == ["node-0", "node-1"]


# -- torch, torchrun mode --------------------------------------------------------------------


def test_torchrun_mode_starts_one_torchrun_per_task() -> None:
    plan = plan_launch(gang(task(0, 8), task(1, 8)), TORCHRUN, TRAIN)
    assert [len(launch.processes) for launch in plan] == [1, 1]
    head, other = plan[0].processes[0], plan[1].processes[0]
    assert other.argv == (
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=8",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=10.0.0.1:29500",
        "--rdzv-id=job-42",
        "--rdzv-conf=is_host=0",
        "--local-addr=10.0.0.2",
        "train.py",
        "--epochs",
        "3",
    )
    assert "--rdzv-conf=is_host=1" in head.argv and "--node-rank=0" in head.argv
    assert other.env == {  # torchrun's own options win over the PET_* it reads
        "GPUPOOL_NODE": "node-1",
        "GPUPOOL_TASK_INDEX": "1",
        "GPUPOOL_TASK_COUNT": "2",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29500",
        "PET_NPROC_PER_NODE": "8",
    }
    assert other.rank is None  # torchrun's stream merges its workers


def test_torchrun_tasks_on_one_loopback_address_name_themselves_apart() -> None:
    """torchrun tells nodes apart by (address, pid), and every sandbox's torchrun has the
    same pid: tasks of a pool on one machine each get a loopback address of their own."""
    tasks = (task(0, 1), task(1, 1), task(2, 1))
    shared = gang(*(t.model_copy(update={"address": "127.0.0.1"}) for t in tasks))
    plan = plan_launch(shared, TORCHRUN, TRAIN)
    addrs = [next(a for a in p.processes[0].argv if a.startswith("--local-addr=")) for p in plan]
    assert addrs == ["--local-addr=127.0.0.1", "--local-addr=127.0.0.2", "--local-addr=127.0.0.3"]


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["python", "train.py", "-x"], ["train.py", "-x"]),
        (["python3.11", "-m", "pkg.train", "-x"], ["-m", "pkg.train", "-x"]),
        (["/usr/bin/python3", "t.py"], ["t.py"]),
        (["train.py", "--lr", "1"], ["train.py", "--lr", "1"]),
        (["python", "-u", "train.py"], ["--no-python", "python", "-u", "train.py"]),
        (["python", "-m"], ["--no-python", "python", "-m"]),
        (["python"], ["--no-python", "python"]),
        (["bash", "run.sh"], ["--no-python", "bash", "run.sh"]),
        (["./a.out"], ["--no-python", "./a.out"]),
        (["pythonista", "x.py"], ["--no-python", "pythonista", "x.py"]),
    ],
)
def test_the_users_command_becomes_torchruns_program(
    command: list[str], program: list[str]
) -> None:
    assert torchrun_program(command) == program


def test_ipv6_addresses_are_bracketed_in_endpoints_only() -> None:
    plan = plan_launch(
        gang(task(0, 1, address="fd00::1"), task(1, 1, address="fd00::2")), TORCHRUN, TRAIN
    )
    assert "--rdzv-endpoint=[fd00::1]:29500" in plan[1].processes[0].argv
    env = plan_launch(gang(task(0, 1, address="fd00::1")), TORCH, TRAIN)[0].processes[0].env
    assert env["MASTER_ADDR"] == "fd00::1"
    assert host_port("head.example", 1) == "head.example:1"


# -- tensorflow ------------------------------------------------------------------------------


def test_tf_config_of_three_workers_is_the_documented_structure() -> None:
    three = gang(task(0, 1), task(1, 1), task(2, 1), port=12345)
    plan = plan_launch(three, TF, TRAIN)
    configs = [json.loads(launch.processes[0].env["TF_CONFIG"]) for launch in plan]
    workers = ["10.0.0.1:12345", "10.0.0.2:12346", "10.0.0.3:12347"]
    assert configs == [
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}} for i in range(3)
    ]
    assert [len(launch.processes) for launch in plan] == [1, 1, 1]
    assert plan[2].processes[0].argv == TRAIN and plan[2].processes[0].rank == 2


def test_tf_workers_on_one_host_listen_on_their_own_ports() -> None:
    local = gang(
        task(0, 2, address="127.0.0.1", port=5001),
        task(1, 2, address="127.0.0.1", port=5002),
    )
    config = json.loads(tf_config(local, local.tasks[1]))
    assert config["cluster"]["worker"] == ["127.0.0.1:5001", "127.0.0.1:5002"]
    clash = gang(
        task(0, 1, address="127.0.0.1", port=5001), task(1, 1, address="127.0.0.1", port=5001)
    )
    with pytest.raises(ValueError, match="distinct addresses"):
        plan_launch(clash, TF, TRAIN)


# -- mpi -------------------------------------------------------------------------------------


def test_mpi_task_0_runs_mpirun_over_a_hostfile_of_aliases() -> None:
    three = gang(task(0, 2, address="127.0.0.1"), task(1, 2, address="127.0.0.1"), task(2, 0))
    plan = plan_launch(three, MPI, ["./allreduce", "-n", "8"], mpi=AGENT)
    head = plan[0]
    assert head.files == {
        "gpupool-hostfile": (
            "gpupool-task-0 slots=2\ngpupool-task-1 slots=2\ngpupool-task-2 slots=1\n"
        )
    }
    assert head.processes[0].argv == (
        "mpirun",
        "--hostfile",
        "gpupool-hostfile",
        "-np",
        "5",
        "--mca",
        "plm_rsh_agent",
        "/opt/gpupool/bin/gpupool-rsh --attempt a-7",  # tree spawn stays on: the default
        "./allreduce",
        "-n",
        "8",
    )
    assert head.decides_exit and head.processes[0].env["GPUPOOL_TASK_INDEX"] == "0"
    assert "GPUPOOL_MPI_LISTEN" not in head.processes[0].env  # task 0 runs mpirun, no service


def test_mpi_other_tasks_idle_and_do_not_decide_the_exit() -> None:
    plan = plan_launch(gang(task(0, 1), task(1, 1)), MPI, ["./a.out"], mpi=AGENT)
    (wait,) = plan[1].processes
    assert wait.argv == ("sleep", "infinity") and wait.rank is None
    assert wait.env == {
        "GPUPOOL_NODE": "node-1",
        "GPUPOOL_TASK_INDEX": "1",
        "GPUPOOL_TASK_COUNT": "2",
        "GPUPOOL_MPI_SECRET": SECRET,
        "GPUPOOL_MPI_HOSTS": '{"gpupool-task-1": "10.0.0.2:29501"}',
        "GPUPOOL_MPI_LISTEN": "10.0.0.2:29501",
    }
    assert (plan[1].decides_exit, plan[1].files) == (False, {})
    custom = MpiAgent(
        argv=("gpupool-rsh",),
        wait_argv=("gpupool-rsh", "--wait"),
        hostfile="mpi/hosts",
        secret=SECRET,
    )
    plan = plan_launch(gang(task(0, 1), task(1, 1)), MPI, ["./a.out"], mpi=custom)
    assert plan[1].processes[0].argv == ("gpupool-rsh", "--wait")
    assert list(plan[0].files) == ["mpi/hosts"]


def test_mpi_tasks_serve_the_agent_on_their_own_ports_and_all_know_where() -> None:
    three = gang(task(0, 1), task(1, 2, port=4101), task(2, 0, address="fe80::2", port=4102))
    plan = plan_launch(three, MPI, ["./a.out"], mpi=AGENT)
    hosts = {"gpupool-task-1": "10.0.0.2:4101", "gpupool-task-2": "[fe80::2]:4102"}
    envs = [launch.processes[0].env for launch in plan]
    assert all(json.loads(env["GPUPOOL_MPI_HOSTS"]) == hosts for env in envs)
    assert all(env["GPUPOOL_MPI_SECRET"] == SECRET for env in envs)
    assert [env.get("GPUPOOL_MPI_LISTEN") for env in envs] == [None, *hosts.values()]
    assert plan[0].processes[0].env_defaults == {}  # not on loopback: Open MPI chooses
    same = {"address": "127.0.0.1", "port": 4101}
    clash = gang(task(0, 1), task(1, 1, **same), task(2, 1, **same))
    with pytest.raises(ValueError, match="distinct addresses"):
        plan_launch(clash, MPI, ["./a.out"], mpi=AGENT)


def test_mpi_on_loopback_keeps_open_mpi_on_lo_unless_the_job_says_otherwise() -> None:
    local = gang(task(0, 1, address="127.0.0.1"), task(1, 1, address="127.0.0.1"))
    head = plan_launch(local, MPI, ["./a.out"], mpi=AGENT)[0].processes[0]
    assert head.env_defaults == {
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "OMPI_MCA_oob_tcp_if_include": "lo",
    }
    assert not any(word == "-x" for word in head.argv)  # ranks get their daemon's env


def test_mpi_agent_needs_a_secret() -> None:
    with pytest.raises(ValidationError, match="secret"):
        MpiAgent(argv=("rsh",))
    with pytest.raises(ValidationError, match="at least 16"):
        MpiAgent(argv=("rsh",), secret="short")


def test_mpi_aliases_map_back_to_tasks() -> None:
    assert [mpi_task_index(mpi_alias(i)) for i in (0, 7, 12)] == [0, 7, 12]
    assert mpi_task_index("node-1") is None
    assert mpi_task_index("gpupool-task-x") is None
    assert mpi_hostfile(gang(task(0, 4))) == "gpupool-task-0 slots=4\n"


def test_mpi_refuses_fractional_gpus_with_a_clear_error() -> None:
    with pytest.raises(InvalidLauncher, match="whole GPUs, not 0.5"):
        plan_launch(gang(task(0, 1), task(1, 0.5)), MPI, ["./a.out"], mpi=AGENT)
    with pytest.raises(InvalidLauncher) as caught:
        check_request(MPI, 0.25, ["./a.out"])
    assert (caught.value.code, caught.value.status) == ("invalid_launcher", 422)
    check_request(MPI, 0, ["./a.out"])  # CPU-only ranks are fine
    check_request(TORCH, 0.5, ["python", "t.py"])


def test_mpi_needs_its_agent_and_an_agent_of_plain_words() -> None:
    with pytest.raises(ValueError, match="rsh agent"):
        plan_launch(gang(task(0, 1)), MPI, ["./a.out"])
    with pytest.raises(ValidationError, match="spaces"):
        MpiAgent(argv=("/opt/my tools/rsh",), secret=SECRET)
    with pytest.raises(ValidationError, match="working directory"):
        MpiAgent(argv=("rsh",), hostfile="../hosts", secret=SECRET)


# -- validation ------------------------------------------------------------------------------


def test_parse_launcher_names_what_is_accepted() -> None:
    assert parse_launcher("torch") == TORCH
    assert parse_launcher("torch", "torchrun") == TORCHRUN
    assert parse_launcher("mpi").kind is LauncherKind.MPI
    with pytest.raises(
        InvalidLauncher, match="unknown launcher 'horovod': use one of torch, tensorflow, mpi"
    ):
        parse_launcher("horovod")
    with pytest.raises(
        InvalidLauncher,
        match="unknown mode 'ddp' of launcher torch: use one of per-gpu, torchrun, per-node",
    ):
        parse_launcher("torch", "ddp")
    with pytest.raises(InvalidLauncher, match="launcher mpi: use one of mpirun") as caught:
        parse_launcher("mpi", "per-gpu")
    assert caught.value.details == {"field": "mode"}
    assert parse_launcher("tensorflow", "chief").mode is LauncherMode.CHIEF
    with pytest.raises(ValidationError, match="no mode per-gpu"):
        Launcher(kind=LauncherKind.TENSORFLOW, mode=LauncherMode.PER_GPU)


def test_an_empty_command_is_refused() -> None:
    with pytest.raises(InvalidLauncher, match="needs a command"):
        plan_launch(gang(task(0, 1)), TORCH, [])


def test_a_layout_must_be_consistent() -> None:
    with pytest.raises(ValidationError, match="indexed 0, 1"):
        gang(task(1, 1))
    with pytest.raises(ValidationError, match="2.0 GPUs but"):
        GangTask(index=0, node="n", address="a", gpus=2, gpu_indices=(0,))
    with pytest.raises(ValidationError, match="whole, or one fraction"):
        GangTask(index=0, node="n", address="a", gpus=1.5, gpu_indices=(0, 1))
    with pytest.raises(ValidationError):
        Gang(job_id="j", tasks=(), rendezvous_port=1)
    with pytest.raises(ValueError, match="past 65535"):
        plan_launch(gang(task(0, 1), task(1, 1), port=65535), TF, TRAIN)


# -- procs_per_node --------------------------------------------------------------------------


def test_procs_per_node_sets_the_ranks_of_each_task_per_gpu() -> None:
    four = Launcher(kind=LauncherKind.TORCH, procs_per_node=4)
    plan = plan_launch(gang(task(0, 2), task(1, 2)), four, TRAIN)
    ranks = [[(p.rank, p.local_rank) for p in launch.processes] for launch in plan]
    assert ranks == [[(0, 0), (1, 1), (2, 2), (3, 3)], [(4, 0), (5, 1), (6, 2), (7, 3)]]
    env = plan[1].processes[3].env
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["PET_NPROC_PER_NODE"]) == (
        "8",
        "4",
        "4",
    )
    assert plan[1].processes[3].env_defaults["OMP_NUM_THREADS"] == "1"


def test_procs_per_node_runs_several_cpu_ranks_and_sizes_torchrun() -> None:
    cpu = plan_launch(gang(task(0, 0)), Launcher(kind=LauncherKind.TORCH, procs_per_node=3), TRAIN)
    assert [p.local_rank for p in cpu[0].processes] == [0, 1, 2]
    torchrun = Launcher(kind=LauncherKind.TORCH, mode=LauncherMode.TORCHRUN, procs_per_node=2)
    head = plan_launch(gang(task(0, 4), task(1, 4)), torchrun, TRAIN)[0].processes[0]
    assert "--nproc-per-node=2" in head.argv and head.env["PET_NPROC_PER_NODE"] == "2"


@pytest.mark.parametrize(("gpus", "procs"), [(4, 1), (4, 2), (4, 4), (4, 8), (2, 6), (0.5, 3)])
def test_procs_per_node_spread_evenly_over_whole_gpus_are_accepted(gpus: float, procs: int) -> None:
    check_request(Launcher(kind=LauncherKind.TORCH, procs_per_node=procs), gpus, TRAIN)


def test_procs_per_node_that_do_not_spread_evenly_are_refused_with_the_choices() -> None:
    with pytest.raises(InvalidLauncher, match=r"divisor of 4 \(1, 2, 4\) or a multiple") as caught:
        check_request(Launcher(kind=LauncherKind.MPI, procs_per_node=3), 4, ["./a.out"])
    assert caught.value.details == {"field": "procs_per_node"}


def test_tensorflow_takes_one_process_per_node_only() -> None:
    check_request(Launcher(kind=LauncherKind.TENSORFLOW, procs_per_node=1), 1, TRAIN)
    with pytest.raises(InvalidLauncher, match="one process per node"):
        check_request(Launcher(kind=LauncherKind.TENSORFLOW, procs_per_node=2), 1, TRAIN)


# -- torch, per-node mode (a PyTorchJob's pods) ----------------------------------------------


PER_NODE = Launcher(kind=LauncherKind.TORCH, mode=LauncherMode.PER_NODE)
TORCHRUN_ITSELF = ("torchrun", "--nproc-per-node=2", "train.py")


def test_per_node_runs_the_command_as_is_with_the_pytorchjob_operators_variables() -> None:
    """As training-operator release-1.9's envvar.go and master.go set them for a Master and
    workers: RANK is the pod's (the node's), WORLD_SIZE the pods times nprocPerNode."""
    plan = plan_launch(gang(task(0, 2), task(1, 2), task(2, 2)), PER_NODE, TORCHRUN_ITSELF)
    assert [len(launch.processes) for launch in plan] == [1, 1, 1]
    second = plan[1].processes[0]
    assert second.argv == TORCHRUN_ITSELF
    assert second.env == {
        "GPUPOOL_NODE": "node-1",
        "GPUPOOL_TASK_INDEX": "1",
        "GPUPOOL_TASK_COUNT": "3",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "3",
        "RANK": "1",
        "PET_NNODES": "3",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.0.0.1",
        "PET_MASTER_PORT": "29500",
    }
    assert second.env_defaults == {"PYTHONUNBUFFERED": "1"}  # the job's own setting wins
    assert second.rank is None and plan[1].decides_exit  # labelled by task in the log


def test_per_node_with_procs_per_node_counts_them_in_the_world() -> None:
    launcher = PER_NODE.model_copy(update={"procs_per_node": 4})
    env = plan_launch(gang(task(0, 4), task(1, 4)), launcher, TORCHRUN_ITSELF)[1].processes[0].env
    assert (env["WORLD_SIZE"], env["RANK"], env["PET_NPROC_PER_NODE"]) == ("8", "1", "4")


# -- tensorflow, chief mode (a TFJob's Chief and Workers) ------------------------------------


def test_chief_mode_makes_task_0_the_chief_as_tfjob_does() -> None:
    three = gang(task(0, 1), task(1, 1), task(2, 1), port=12345)
    chief = Launcher(kind=LauncherKind.TENSORFLOW, mode=LauncherMode.CHIEF)
    configs = [
        json.loads(p.processes[0].env["TF_CONFIG"]) for p in plan_launch(three, chief, TRAIN)
    ]
    cluster = {"chief": ["10.0.0.1:12345"], "worker": ["10.0.0.2:12346", "10.0.0.3:12347"]}
    assert configs == [
        {"cluster": cluster, "task": {"type": "chief", "index": 0}, "environment": "cloud"},
        {"cluster": cluster, "task": {"type": "worker", "index": 0}, "environment": "cloud"},
        {"cluster": cluster, "task": {"type": "worker", "index": 1}, "environment": "cloud"},
    ]


def test_a_chief_alone_has_no_worker_list() -> None:
    config = json.loads(tf_config(gang(task(0, 1)), task(0, 1), chief=True))
    assert config["cluster"] == {"chief": ["10.0.0.1:29500"]}
