"""Jobs over several nodes through the real CLI against a real server of one machine (4
declared A100s): `gpupool run --nodes` queues a gang that waits with its reason, `show` and
`ls` say what it asks for, bad combinations are refused before anything is sent, and `gpupool
logs --rank N` prints one rank's lines of a log whose lines carry rank prefixes."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.cli import CLI_TIMEOUT, FINAL, Cli, hold, refused, wait_for, wait_status

# a merged log of a distributed job, as the executor writes it (here a job prints it itself)
LINES = "[rank 0] a\n[rank 1] b\n[rank 0] c\n[task 1] d\nplain\n[rank 1] e\n"


def test_a_job_over_two_nodes_waits_with_a_reason_and_show_and_ls_say_what_it_asks(
    admin: Cli,
) -> None:
    gang = ["--nodes", "2", "--gpus-per-node", "4", "--launcher", "torch", "--torchrun"]
    job_id = admin.submit(*gang, "--retries", "1", "--allow-cross-fabric", "--", "python", "t.py")

    def waiting() -> dict | None:
        job = admin.job(job_id)
        return job if job["reason"] not in (None, "Queued", "Submitted") else None

    job = wait_for(waiting, what="the scheduler's reason for the gang")
    assert job["status"] == "pending", job
    spec = job["spec"]
    assert (spec["nodes"], spec["resources"]["gpus"], spec["retries"]) == (2, 4, 1)
    assert (spec["launcher"], spec["launcher_mode"], spec["allow_cross_fabric"]) == (
        "torch",
        "torchrun",
        True,
    )

    shown = admin.ok("show", str(job_id))
    assert "resources:  per node: gpus 4, cpus 1" in shown
    expected = "2 nodes × 4 GPUs (8 GPUs in all), launcher torch, one torchrun per node"
    assert f"nodes:      {expected}\n" in shown
    assert "nodes may be on different fabrics, retries 1 when a node fails" in shown
    assert f"pending  {job['reason']}" in shown
    row = next(line for line in admin.ok("ls").splitlines() if line.startswith(str(job_id)))
    assert "2 nodes × 4 GPUs, torch, one torchrun per node" in row and "pending" in row
    admin.ok("cancel", str(job_id))


def test_bad_combinations_are_refused_before_anything_is_sent(admin: Cli) -> None:
    before = len(admin.json("ls", "--all"))
    cases = {
        ("--gpus", "2", "--gpus-per-node", "4"): "give one of them",
        ("--nodes", "2", "--torchrun"): "--torchrun starts one torchrun per node",
        ("--launcher", "tensorflow", "--torchrun"): "needs --launcher torch",
        ("--launcher", "torch", "--chief"): "needs --launcher tensorflow",
        ("--launcher", "torch", "--mpirun"): "runs the command as mpirun's own line",
        ("--launcher", "torch", "--torchrun", "--per-node"): "give one",
        ("--launcher", "torch", "--procs-per-node", "0"): "--procs-per-node",
        ("--launcher", "mpi", "--gpus-per-node", "0.5"): "whole GPUs, not 0.5",
        ("--launcher", "jax"): "'jax' is not one of",
        ("--nodes", "0"): "--nodes",
        ("--retries", "-1"): "--retries",
    }
    for options, says in cases.items():
        result = admin("run", *options, "--", "python", "t.py")
        assert result.returncode == 2, (options, result.stderr)
        assert says in " ".join(result.stderr.replace("│", " ").split()), (options, result.stderr)
    assert len(admin.json("ls", "--all")) == before
    # what only the server knows: at most 256 nodes
    too_many = admin("run", "--nodes", "300", "--", "python", "t.py")
    assert refused(too_many, "invalid_request") and "nodes:" in too_many.stderr


def test_procs_per_node_runs_that_many_ranks_on_the_node(admin: Cli) -> None:
    """A real job of 2 GPUs and 4 processes: each rank sees torchrun's and the PyTorchJob
    operator's variables, its lines labelled by its rank."""
    say = 'echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE $PET_NPROC_PER_NODE"'
    options = ["--launcher", "torch", "--gpus", "2", "--procs-per-node", "4"]
    job_id = admin.submit(*options, "--", "sh", "-c", say)
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"
    log = admin.ok("logs", str(job_id))
    lines = sorted(line for line in log.splitlines() if line.startswith("[rank "))
    assert lines == [f"[rank {i}] rank {i}/4 local {i}/4 4" for i in range(4)], log
    assert "torch, 4 processes per node" in admin.ok("show", str(job_id))


def test_per_node_runs_the_command_once_with_the_pytorchjob_variables(admin: Cli) -> None:
    say = 'echo "rank $RANK of $WORLD_SIZE nodes $PET_NNODES at $PET_MASTER_ADDR:$PET_MASTER_PORT"'
    options = ["--launcher", "torch", "--per-node", "--procs-per-node", "2"]
    job_id = admin.submit(*options, "--", "sh", "-c", say)
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"
    log = admin.ok("logs", str(job_id))
    assert log.startswith("rank 0 of 2 nodes 1 at 127.0.0.1:"), log  # one process: no label
    spec = admin.job(job_id)["spec"]
    assert (spec["launcher_mode"], spec["procs_per_node"]) == ("per-node", 2)


def test_same_gpus_given_twice_is_one_request(admin: Cli) -> None:
    job_id = admin.submit("--gpus", "1", "--gpus-per-node", "1", "--", "true")
    assert admin.job(job_id)["spec"]["resources"]["gpus"] == 1
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"


def test_logs_rank_prints_only_that_rank_s_lines_without_their_prefix(admin: Cli) -> None:
    job_id = admin.submit("--", sys.executable, "-c", f"print({LINES!r}, end='')")
    assert wait_status(admin, job_id, FINAL)["status"] == "succeeded"
    assert admin.ok("logs", str(job_id)) == LINES
    assert admin.ok("logs", "--rank", "1", str(job_id)) == "b\ne\n"
    assert admin.ok("logs", "-f", "--rank", "0", str(job_id)) == "a\nc\n"
    assert admin.ok("logs", "--task", "1", "--attempt", "1", str(job_id)) == "d\n"
    nothing = admin("logs", "--rank", "5", str(job_id))
    assert nothing.returncode == 0 and nothing.stdout == ""
    assert "no lines of rank 5 so far" in nothing.stderr
    both = admin("logs", "--rank", "0", "--task", "0", str(job_id))
    assert both.returncode == 2 and "not both" in both.stderr


def test_logs_follow_of_one_rank_goes_on_past_the_other_ranks_lines(
    admin: Cli, release: Path, exchange: Path
) -> None:
    before = r"printf '[rank 0] zero\n[rank 1] one\n[rank 0] zero again\n'; "
    after = r"; printf '[rank 0] late zero\n[rank 1] late one\n'"
    job_id = admin.submit("--workdir", str(exchange), *hold(release, before, after))
    wait_for(lambda: "zero again" in admin.ok("logs", str(job_id)), what="the first lines")
    follower = admin.popen("logs", "-f", "--rank", "1", str(job_id))
    release.touch()
    out, err = follower.communicate(timeout=CLI_TIMEOUT)
    assert follower.returncode == 0, err
    assert out == "one\nlate one\n"
