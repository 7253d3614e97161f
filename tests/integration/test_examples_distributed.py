"""The distributed examples on their own, without gpupool: two real PyTorch DDP ranks (gloo, on
the CPU) started by hand and by torchrun, and a real MPI allreduce started by Open MPI's mpirun,
directly and through an rsh agent as gpupool's MPI launch uses it. All on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.distributed import (
    DDP_EXAMPLE,
    HOSTS,
    MPI_EXAMPLE,
    gloo_loopback_env,
    needs_open_mpi,
    needs_torch,
    open_mpi_loopback_env,
    parse_allreduce,
    parse_ddp,
)
from tests.support.server import free_port

HANG_GUARD_S = 240  # ends a hung rendezvous; says nothing about speed
STEPS = 40  # ddp_train.py's default
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@needs_torch
def test_ddp_two_ranks_started_by_hand_end_identical_and_learn() -> None:
    rendezvous = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    envs = [rendezvous | {"RANK": rank, "LOCAL_RANK": rank} for rank in ("0", "1")]
    runs = _run_together([([sys.executable, str(DDP_EXAMPLE)], env) for env in envs])
    assert "rank 1 world_size 2 local_rank 1" in runs[1].stdout
    _assert_learned_and_identical("".join(run.stdout for run in runs))


@needs_torch
@pytest.mark.parametrize(
    "layout",
    [
        pytest.param((1, 2), id="one-torchrun-two-ranks"),
        pytest.param((2, 1), id="torchrun-per-node"),
    ],
)
def test_ddp_under_torchrun_ends_identical_and_learns(layout: tuple[int, int]) -> None:
    nodes, per_node = layout
    port = str(free_port())
    commands = [
        TORCHRUN
        + [f"--nnodes={nodes}", f"--node-rank={node}", f"--nproc-per-node={per_node}"]
        + ["--master-addr=127.0.0.1", f"--master-port={port}", str(DDP_EXAMPLE)]
        for node in range(nodes)
    ]
    runs = _run_together([(command, {}) for command in commands])
    _assert_learned_and_identical("".join(run.stdout for run in runs))


@needs_open_mpi
def test_mpi_allreduce_over_two_ranks_is_the_sum() -> None:
    command = ["mpirun", "--oversubscribe", "-np", "2", sys.executable, str(MPI_EXAMPLE)]
    (run,) = _run_together([(command, open_mpi_loopback_env())])
    assert parse_allreduce(run.stdout) == (1 + 2, 2), run.stdout + run.stderr


@needs_open_mpi
def test_mpi_allreduce_through_an_rsh_agent_reaches_both_aliased_hosts(tmp_path: Path) -> None:
    agent, calls = _fake_rsh_agent(tmp_path)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("gpupool-task-0 slots=1\ngpupool-task-1 slots=1\n")
    command = ["mpirun", "--mca", "plm_rsh_agent", str(agent), "--hostfile", str(hostfile)]
    command += ["-np", "2", sys.executable, str(MPI_EXAMPLE)]
    (run,) = _run_together([(command, open_mpi_loopback_env())])
    assert parse_allreduce(run.stdout) == (1 + 2, 2), run.stdout + run.stderr
    assert len(HOSTS.search(run.stdout)[1].split(",")) == 2
    # mpirun asked the agent once per alias, to start Open MPI's daemon (orted) there.
    seen = sorted(line.split("|") for line in calls.read_text().splitlines())
    assert [(host, what.strip()) for host, what in seen] == [
        ("gpupool-task-0", "orted"),
        ("gpupool-task-1", "orted"),
    ]


def _fake_rsh_agent(tmp_path: Path) -> tuple[Path, Path]:
    """An agent that stands in for gpupool's: notes the alias and command, runs it here.

    mpirun calls it as `agent ALIAS ' orted' -mca ess '"env"' ...`: the words carry shell
    quoting, so the agent hands them to a shell, as ssh would on the remote side.
    """
    agent, calls = tmp_path / "agent.sh", tmp_path / "agent-calls"
    # each alias gets a TMPDIR of its own, as each task's sandbox has its own /tmp: Open MPI
    # daemons sharing one race to make their session directories there
    script = (
        f'#!/bin/sh\nprintf "%s|%s\\n" "$1" "$2" >> {calls}\n'
        f'TMPDIR={tmp_path}/tmp-$1; export TMPDIR; mkdir -p "$TMPDIR"\nshift\nexec sh -c "$*"\n'
    )
    agent.write_text(script)
    agent.chmod(0o755)
    return agent, calls


def _assert_learned_and_identical(output: str) -> None:
    ddp = parse_ddp(output)
    assert len(ddp.losses) == STEPS, output
    assert ddp.losses[-1] < ddp.losses[0] / 2, ddp.losses
    assert len(ddp.digests) == 2 and ddp.digests[0] == ddp.digests[1], ddp.digests


def _run_together(
    commands: list[tuple[list[str], dict[str, str]]],
) -> list[subprocess.CompletedProcess[str]]:
    """Starts every command at once (ranks wait for each other), then waits for all of them."""
    base = os.environ | gloo_loopback_env()
    procs = [_start(command, base | env) for command, env in commands]
    try:
        runs = [_finish(proc) for proc in procs]
    finally:
        for proc in procs:  # only those a hang guard gave up on are still running
            proc.kill()
            proc.wait()
    for run in runs:
        assert run.returncode == 0, f"{run.args} exited {run.returncode}:\n{run.stderr}"
    return runs


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
