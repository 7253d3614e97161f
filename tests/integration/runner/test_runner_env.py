"""The workload's environment, working directory and job directories."""

from __future__ import annotations

import json
import os

from runner_harness import RunnerHarness, py

DUMP_ENV = "import json, os; print('ENV=' + json.dumps(dict(os.environ)) + '', flush=True)"


def workload_env(harness: RunnerHarness) -> dict[str, str]:
    line = next(line for line in harness.log().splitlines() if line.startswith("ENV="))
    return json.loads(line[len("ENV=") :])


def test_gpupool_variables_and_one_gpu(harness: RunnerHarness) -> None:
    harness.write_spec(py(DUMP_ENV), gpu_uuids=["GPU-1111aaaa-0000-0000-0000-000000000001"])
    assert harness.run().returncode == 0
    env = workload_env(harness)
    visible = env["CUDA_VISIBLE_DEVICES"].split(",")
    assert visible == ["GPU-1111aaaa-0000-0000-0000-000000000001"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
    assert env["GPUPOOL_JOB_ID"] == "42"
    assert env["GPUPOOL_ATTEMPT"] == "1"
    assert env["GPUPOOL_CHECKPOINT_DIR"] == str(harness.checkpoint_dir)
    assert env["GPUPOOL_OUTPUT_DIR"] == str(harness.output_dir)
    assert harness.checkpoint_dir.is_dir()
    assert harness.output_dir.is_dir()


def test_several_gpus_exactly_in_order(harness: RunnerHarness) -> None:
    uuids = ["GPU-b", "GPU-a", "GPU-c"]
    harness.write_spec(py(DUMP_ENV), gpu_uuids=uuids)
    assert harness.run().returncode == 0
    assert workload_env(harness)["CUDA_VISIBLE_DEVICES"] == "GPU-b,GPU-a,GPU-c"


def test_cpu_job_sees_no_gpu(harness: RunnerHarness) -> None:
    harness.write_spec(py(DUMP_ENV), gpu_uuids=[])
    assert harness.run().returncode == 0
    env = workload_env(harness)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NVIDIA_VISIBLE_DEVICES"] == ""


def test_spec_env_passed_and_gpupool_variables_win(harness: RunnerHarness) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "MY_SETTING": "hello world",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
    }
    harness.write_spec(py(DUMP_ENV), env=env, gpu_uuids=["GPU-x"])
    assert harness.run().returncode == 0
    seen = workload_env(harness)
    assert seen["MY_SETTING"] == "hello world"
    assert seen["CUDA_VISIBLE_DEVICES"] == "GPU-x"


def test_runner_environment_does_not_leak(harness: RunnerHarness) -> None:
    harness.write_spec(py(DUMP_ENV))
    proc = harness.spawn(env={**os.environ, "GPUPOOL_TEST_SERVER_SECRET": "s3cret"})
    assert harness.wait_for_exit(proc) == 0
    assert "GPUPOOL_TEST_SERVER_SECRET" not in workload_env(harness)


def test_workdir_is_the_cwd(harness: RunnerHarness) -> None:
    workdir = harness.work
    harness.write_spec(py("import os; print('CWD=' + os.getcwd())"), workdir=str(workdir))
    assert harness.run().returncode == 0
    assert f"CWD={workdir}" in harness.log()
