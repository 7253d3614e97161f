"""executors/task.py: a task survives its JSON form, as a pool's node receives it."""

from __future__ import annotations

import json

from gpupool.executors.task import GpuGrant, TaskSpec, task_from_json, task_to_json


def test_a_task_reads_back_from_its_json_form() -> None:
    task = TaskSpec(
        3,
        1,
        "n0",
        ["python", "train.py"],
        {"A": "1"},
        None,
        ["GPU-a"],
        1024,
        5.0,
        gpu_grants=(GpuGrant("GPU-a", 0.5, 2**30),),
        launch={"kind": "torchrun"},
    )
    sent = task_to_json(task)
    json.dumps(sent)  # plain JSON data, no objects
    assert task_from_json(sent) == task
    assert task_from_json(json.loads(json.dumps(sent))).gpu_grants == task.gpu_grants
