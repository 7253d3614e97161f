"""Metrics through the real runner: the job logs with gpupool.metrics, the runner keeps the
valid points in the attempt's records, says once what it refused, and adds GPU samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner_harness import RunnerHarness, py, sandbox_policy

import gpupool

PACKAGE_ROOT = str(Path(gpupool.__file__).resolve().parents[1])


def write_spec(harness: RunnerHarness, command: list[str], **overrides: Any) -> None:
    """The harness's spec; a sandbox also shows gpupool's package, as the server's does."""
    if harness.sandboxed:
        policy = sandbox_policy(harness.root)
        policy["readonly"].append(PACKAGE_ROOT)
        overrides["sandbox"] = policy
    harness.write_spec(command, **overrides)


def records(harness: RunnerHarness) -> list[list[object]]:
    path = harness.dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_job_logs_points_and_the_runner_keeps_them(harness: RunnerHarness) -> None:
    code = (
        "from gpupool import metrics\n"
        "for step in range(5):\n"
        "    metrics.log(step=step, loss=1.0 / (step + 1))\n"
        "with open(__import__('os').environ['GPUPOOL_METRICS_FILE'], 'a') as f:\n"
        '    f.write(\'{"step": 9, "acc": 0.5}\\n\')\n'  # the flat form, written by hand
        '    f.write(\'not json\\n{"values": {"gpu.0.utilization": 99}}\\n\')\n'
        '    f.write(\'{"step": 10, "values": {"loss": NaN}}\\n\')\n'
        '    f.write(\'{"step": 11, "values": {"last": 1}}\')\n'  # no newline at the end
    )
    write_spec(harness, py(code))
    assert harness.run().returncode == 0
    points = records(harness)
    assert [(p[0], p[1], p[3]) for p in points] == [
        ("loss", 0, 1.0),
        ("loss", 1, 0.5),
        ("loss", 2, 1 / 3),
        ("loss", 3, 0.25),
        ("loss", 4, 0.2),
        ("acc", 9, 0.5),
        ("last", 11, 1.0),
    ]
    log = harness.log()
    assert log.count("metrics: line 7: not JSON") == 1
    assert "names starting with gpu. are the runner's own" in log
    assert "is not a finite number" in log
    assert "metrics: not kept: lines not JSON objects (1); lines with a bad name (1); " in log


def test_gpu_samples_come_from_the_sampler_by_the_jobs_gpu_index(harness: RunnerHarness) -> None:
    samples = harness.work / "gpus.json"
    busy = {"utilization": 87, "memory_used": 2**30, "1234": 5}
    samples.write_text(json.dumps({"GPU-b": busy, "GPU-a": {"utilization": 0}}))
    write_spec(
        harness, py("print('ran')"), gpu_uuids=["GPU-b", "GPU-a"], gpu_sampler=f"file:{samples}"
    )
    assert harness.run().returncode == 0
    by_name = {p[0]: p[3] for p in records(harness)}
    assert by_name == {
        "gpu.0.utilization": 87.0,
        "gpu.0.memory_used": float(2**30),
        "gpu.1.utilization": 0.0,
    }


def test_declared_gpus_without_nvml_give_no_samples(harness: RunnerHarness) -> None:
    write_spec(harness, py("print('ran')"), gpu_uuids=["GPU-declared-0"], gpu_sampler="nvml")
    assert harness.run().returncode == 0
    assert not (harness.dir / "metrics.jsonl").exists() or records(harness) == []


def test_a_link_left_where_the_metrics_file_goes_is_not_followed(harness: RunnerHarness) -> None:
    """A job (an earlier attempt) that put a link to another file at its metrics file's place
    cannot make the runner truncate or read that file."""
    victim = harness.work / "victim.txt"
    victim.write_text('{"step": 1, "values": {"stolen": 1}}\n')
    place = Path(harness.output_dir) / ".gpupool" / "metrics-1.jsonl"
    place.parent.mkdir(parents=True)
    place.symlink_to(victim)
    write_spec(harness, py("from gpupool import metrics; metrics.log(step=0, mine=1)"))
    assert harness.run().returncode == 0
    assert victim.read_text() == '{"step": 1, "values": {"stolen": 1}}\n'
    assert [p[0] for p in records(harness)] == ["mine"]


def test_a_line_nested_too_deep_is_refused_and_the_job_runs_on(harness: RunnerHarness) -> None:
    """A line of JSON nested 30,000 deep (within the line cap) is refused like any bad line,
    said once in the log; the runner survives and keeps the points after it."""
    code = (
        "import os\n"
        "from gpupool import metrics\n"
        "with open(os.environ['GPUPOOL_METRICS_FILE'], 'a') as f:\n"
        "    f.write('[' * 30000 + ']' * 30000 + '\\n')\n"
        "    f.write('{\"a\":' * 10000 + '1' + '}' * 10000 + '\\n')\n"
        "metrics.log(step=1, after=2)\n"
        "print('still here')\n"
    )
    write_spec(harness, py(code))
    assert harness.run().returncode == 0
    assert [(p[0], p[1], p[3]) for p in records(harness)] == [("after", 1, 2.0)]
    log = harness.log()
    assert "still here" in log
    assert log.count("metrics: line 1: nested too deep") == 1
    assert "lines not JSON objects (2)" in log
