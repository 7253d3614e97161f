"""A small, deterministic PyTorch DDP training on the CPU (gloo), to check a distributed launch.

Run it the way torchrun runs it: one process per rank, with RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT in the environment, for example on one machine:

    torchrun --nnodes 1 --nproc-per-node 2 examples/ddp_train.py

It trains a tiny network to fit a fixed linear function of synthetic data, each rank on its
own shard, and prints machine-readable lines on stdout:

    rank R world_size W local_rank L    every rank, at the start
    loss STEP VALUE                     rank 0, each step: the mean loss over all ranks
    weights SHA256                      every rank, at the end: the hash of its parameters

Both ranks end with the same SHA256 when gradients were averaged across them, and the last
loss is lower than the first when the training learned. Needs only torch (no GPU, no numpy).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FEATURES = 8
SAMPLES = 512
DATA_SEED = 1234  # the same data on every rank, sharded by rank
MODEL_SEED = 0  # the same initial weights on every rank (DDP also broadcasts rank 0's)


def say(line: str) -> None:
    """One line in one write: ranks share a stdout (torchrun runs Python unbuffered, where
    print writes the text and its newline apart, and two ranks' lines would interleave)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    """Trains for --steps steps across the ranks torchrun's environment describes."""
    args = _parse_args()
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # Two ranks on a 2-core machine: one thread each, or they fight over the cores.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size)
    try:
        say(f"rank {rank} world_size {world_size} local_rank {local_rank}")
        model = train(rank, world_size, args.steps, args.lr)
        say(f"weights {weights_digest(model)}")
        # every rank done before any tears the group down: a rank whose peer closed the
        # connections mid-teardown can die in gloo's threads ("terminate called without an
        # active exception"), failing a training that had finished
        dist.barrier()
    finally:
        dist.destroy_process_group()


def train(rank: int, world_size: int, steps: int, lr: float) -> nn.Module:
    """Full-batch SGD on this rank's shard; DDP averages the gradients over all ranks."""
    inputs, targets = _shard(_dataset(), rank, world_size)
    torch.manual_seed(MODEL_SEED)
    model = DistributedDataParallel(_network())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        _report_loss(step, loss.detach(), rank, world_size)
    return model.module


def weights_digest(model: nn.Module) -> str:
    """SHA-256 of the flattened parameters, each written with 6 decimals."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    text = ",".join(f"{value:.6f}" for value in flat.tolist())
    return hashlib.sha256(text.encode()).hexdigest()


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps (default 40)")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    return parser.parse_args()


def _dataset() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(DATA_SEED)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    true_weights = torch.randn(FEATURES, 1, generator=generator)
    noise = 0.01 * torch.randn(SAMPLES, 1, generator=generator)
    return inputs, inputs @ true_weights + noise


def _shard(
    data: tuple[torch.Tensor, torch.Tensor], rank: int, world_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = data
    return inputs[rank::world_size], targets[rank::world_size]


def _network() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))


def _report_loss(step: int, loss: torch.Tensor, rank: int, world_size: int) -> None:
    # Every rank takes part in the reduction; only rank 0 prints the mean.
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)
    if rank == 0:
        say(f"loss {step} {loss.item() / world_size:.6f}")


if __name__ == "__main__":
    main()
