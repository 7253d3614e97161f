"""A real trial of benchmarks/experiments.py: a small neural network on scikit-learn's digits.

Run as a trial's program (``python -c`` with this text, by the server's Python, which sees
the virtual environment's scikit-learn): it reads its point from ``GPUPOOL_PARAMS`` (``lr``,
``alpha``, ``hidden``, ``batch``) and ``MAX_TIME`` and ``EPOCH_SECONDS`` from its
environment, trains scikit-learn's ``MLPClassifier`` one epoch at a time (``partial_fit``) on
70 % of the 1,797 bundled 8x8 digits, and logs ``val_error`` on the other 30 % after each
epoch with ``gpupool.metrics``. The split and the network's initial weights are seeded, so a
point gives the same curve in every run.

An epoch of this network takes about 15 ms; each is padded to ``EPOCH_SECONDS`` so that the
experiments pipeline's reaction (a few tenths of a second from a point logged to a verdict
applied) is an epoch or two, as it is for models whose epochs take seconds or more.
"""

from __future__ import annotations

import json
import os
import time
import warnings


def main() -> None:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    from gpupool import metrics

    warnings.filterwarnings("ignore")  # a point whose learning rate diverges says so each epoch
    params = json.loads(os.environ["GPUPOOL_PARAMS"])
    max_time, pace = int(os.environ["MAX_TIME"]), float(os.environ["EPOCH_SECONDS"])
    features, labels = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        features / 16.0, labels, test_size=0.3, random_state=0, stratify=labels
    )
    model = MLPClassifier(
        hidden_layer_sizes=(int(params["hidden"]),),
        learning_rate_init=params["lr"],
        alpha=params["alpha"],
        batch_size=int(params["batch"]),
        random_state=0,
    )
    classes = np.arange(10)
    for epoch in range(1, max_time + 1):
        began = time.monotonic()
        model.partial_fit(x_train, y_train, classes=classes)
        metrics.log(step=epoch, val_error=1.0 - model.score(x_val, y_val))
        time.sleep(max(0.0, began + pace - time.monotonic()))


if __name__ == "__main__":
    main()
