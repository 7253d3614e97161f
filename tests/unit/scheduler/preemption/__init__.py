"""Tests of ``gpupool.scheduler.preemption``, one file per module of it, and the pools they
share."""

from tests.support.scheduling import gpu_node

ONE_GPU = [gpu_node("node-a", 1)]
TWO_GPUS = [gpu_node("node-a", 2)]
