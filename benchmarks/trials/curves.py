"""A synthetic trial of benchmarks/experiments.py: a seeded family of learning curves.

Run as a trial's program (``python -c`` with this text): it reads its point from
``GPUPOOL_PARAMS`` (``x``, ``y`` in [0, 1], ``lr`` in [1e-4, 1]) and ``FAMILY``, ``MAX_TIME``
and ``EPOCH_SECONDS`` from its environment, and logs ``loss`` once an epoch with
``gpupool.metrics``. It saves the epoch it has logged to ``$GPUPOOL_CHECKPOINT_DIR/epoch``
after logging it, and a new attempt (after a preemption) resumes after it: a trial stopped
between the two logs that epoch again rather than losing it.

The family (``loss``): a power-law learning curve ``final + scale * epoch ** -speed``, the
usual shape of a validation loss. ``final`` is the squared distance of the point to the
family's optimum; ``scale`` and ``speed`` vary from point to point (a larger ``lr`` learns
faster), so curves cross and an early rank is a good but imperfect guide to the final one.
Imported by the benchmark, which computes its targets from the same function.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from pathlib import Path


def loss(params: dict[str, float], epoch: int, family: int) -> float:
    """Point ``params``'s loss after ``epoch`` epochs, in curve family ``family``."""
    x0, y0, lr0 = optimum(family)
    lr = math.log10(params["lr"])
    final = (params["x"] - x0) ** 2 + (params["y"] - y0) ** 2 + 0.05 * (lr - lr0) ** 2
    u, v = _units(family, params)
    scale = 0.3 + 0.5 * u
    speed = 0.3 + 0.4 * (lr + 4) / 4 + 0.4 * v
    return final + scale * epoch**-speed


def optimum(family: int) -> tuple[float, float, float]:
    """The family's best point: x, y and log10(lr)."""
    chance = random.Random(family)
    return chance.uniform(0.1, 0.9), chance.uniform(0.1, 0.9), chance.uniform(-3.0, -1.0)


def random_point(chance: random.Random) -> dict[str, float]:
    """A point drawn as the random sampler draws it (uniform; lr log-uniform)."""
    return {"x": chance.random(), "y": chance.random(), "lr": 10 ** chance.uniform(-4.0, 0.0)}


def _units(family: int, params: dict[str, float]) -> tuple[float, float]:
    """Two numbers in [0, 1) that depend on nothing but the family and the point."""
    key = json.dumps([family, params["x"], params["y"], params["lr"]]).encode()
    digest = hashlib.sha256(key).digest()
    return digest[0] / 256 + digest[1] / 65536, digest[2] / 256 + digest[3] / 65536


def main() -> None:
    from gpupool import metrics

    params = json.loads(os.environ["GPUPOOL_PARAMS"])
    family, max_time = int(os.environ["FAMILY"]), int(os.environ["MAX_TIME"])
    pace = float(os.environ["EPOCH_SECONDS"])
    saved = Path(os.environ["GPUPOOL_CHECKPOINT_DIR"]) / "epoch"
    done = int(saved.read_text()) if saved.exists() else 0
    began = time.monotonic()
    for epoch in range(done + 1, max_time + 1):
        time.sleep(max(0.0, began + pace * (epoch - done) - time.monotonic()))
        metrics.log(step=epoch, loss=loss(params, epoch, family))
        partial = saved.with_suffix(".part")
        partial.write_text(str(epoch))
        partial.replace(saved)  # whole or not at all, should the attempt be stopped here


if __name__ == "__main__":
    main()
