"""Train a tiny PyTorch model on the CPU, report its loss per step, save it as TorchScript.

    gpupool run -- python examples/train_tiny.py --steps 50

It fits a small network to a fixed linear function of synthetic data (deterministic: the
same seed gives the same model), reports ``loss`` and ``lr`` at each step with
``gpupool.metrics.log`` (the job page draws them), and writes the trained model as TorchScript
to ``$GPUPOOL_OUTPUT_DIR/model.pt`` (``./model.pt`` outside gpupool). The model takes a batch
of 8 features and returns one value per row. Needs only torch (no GPU, no numpy).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
from torch import nn

from gpupool import metrics

FEATURES = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    inputs = torch.randn(256, FEATURES)
    targets = inputs @ torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1) + 0.5
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        metrics.log(step=step, loss=loss.item(), lr=args.lr)
    out = Path(os.environ.get("GPUPOOL_OUTPUT_DIR", "."))
    torch.jit.script(model.eval()).save(str(out / "model.pt"))
    print(f"final loss {loss.item():.6f}; model saved to {out / 'model.pt'}", flush=True)


if __name__ == "__main__":
    main()
