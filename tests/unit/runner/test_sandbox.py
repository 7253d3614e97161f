"""A job shown a model version's files (a deployment's replica): GPUPOOL_MODEL_DIR names them,
and the sandbox shows them read-only, inside the data directory it otherwise hides. A job's
/dev/shm is sized as it asked, where the node's bwrap can."""

from __future__ import annotations

from pathlib import Path

from gpupool.runner.sandbox import bwrap_argv, shm_note
from gpupool.runner.wire import RunnerSpec, SandboxPolicy


def test_the_model_directory_is_bound_read_only_over_the_hidden_data_directory(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    outputs, model = data / "jobs" / "5" / "outputs", data / "jobs" / "5" / "model"
    for directory in (outputs, model):
        directory.mkdir(parents=True)
    policy = SandboxPolicy({"bwrap": "/usr/bin/bwrap", "readonly": ["/usr"], "hidden": [str(data)]})
    argv = bwrap_argv(
        policy, ["serve"], str(outputs), [str(outputs)], None, 3, 4, None, [str(model)]
    )
    text = " ".join(argv)
    assert f"--bind {outputs} {outputs}" in text
    assert f"--ro-bind {model} {model}" in text and f"--bind {model}" not in text
    policy.readonly.append(str(tmp_path))  # a shown path above the data directory: masked
    shown = " ".join(bwrap_argv(policy, ["serve"], "/", [], None, 3, 4, None, [str(model)]))
    assert shown.index(f"--tmpfs {data}") < shown.index(f"--ro-bind {model} {model}")


def test_the_job_is_told_where_its_model_is(tmp_path: Path) -> None:
    raw = {
        "version": 1,
        "job_id": 5,
        "attempt": 1,
        "command": ["serve"],
        "log_limit_bytes": 0,
        "stop_grace_seconds": 1,
        "checkpoint_dir": str(tmp_path / "c"),
        "output_dir": str(tmp_path / "o"),
        "model_dir": str(tmp_path / "m"),
    }
    assert RunnerSpec(raw).workload_env()["GPUPOOL_MODEL_DIR"] == str(tmp_path / "m")
    assert "GPUPOOL_MODEL_DIR" not in RunnerSpec(raw | {"model_dir": None}).workload_env()


def test_dev_shm_is_sized_when_asked_and_the_bwrap_can() -> None:
    base = {"bwrap": "/usr/bin/bwrap", "readonly": ["/usr"]}
    sized = SandboxPolicy(base | {"shm_bytes": 2**31, "bwrap_size": True})
    text = " ".join(bwrap_argv(sized, ["x"], "/", [], None, 3, 4))
    assert "--perms 1777 --size 2147483648 --tmpfs /dev/shm" in text
    assert shm_note(sized) is None
    for policy in (
        SandboxPolicy(base),
        SandboxPolicy(base | {"shm_bytes": 2**31, "bwrap_size": False}),
    ):
        text = " ".join(bwrap_argv(policy, ["x"], "/", [], None, 3, 4))
        assert "--size" not in text and "--perms 1777 --tmpfs /dev/shm" in text
    unsized = SandboxPolicy(base | {"shm_bytes": 2**31, "bwrap_size": False})
    assert "not enforced" in (shm_note(unsized) or "") and shm_note(SandboxPolicy(base)) is None
