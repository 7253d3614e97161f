"""The idle rule of notebooks and the command that starts their JupyterLab, as data."""

from __future__ import annotations

import pytest

from gpupool.domain.notebooks import (
    TOKEN_ENV,
    Kernel,
    NotebookRequest,
    idle_message,
    judge,
    launch_command,
    token_env,
)

IDLE = 1800.0
NOW = 10_000.0


def test_a_busy_kernel_is_activity_now_however_old_its_last_message() -> None:
    verdict = judge([Kernel(busy=True, last_activity=0.0)], 0.0, False, NOW, IDLE)
    assert verdict.active_at == NOW and not verdict.stop


def test_gpu_use_since_the_last_look_is_activity_now() -> None:
    verdict = judge([Kernel(busy=False, last_activity=0.0)], 0.0, True, NOW, IDLE)
    assert verdict.active_at == NOW and not verdict.stop


@pytest.mark.parametrize("gpu", [False, None])  # None: declared GPUs, kernels alone decide
def test_idle_kernels_and_unused_gpus_stop_it_after_the_idle_time(gpu: bool | None) -> None:
    kernels = [Kernel(False, NOW - IDLE - 5), Kernel(False, NOW - IDLE - 1)]
    verdict = judge(kernels, NOW - IDLE - 60, gpu, NOW, IDLE)
    assert verdict.stop and verdict.active_at == NOW - IDLE - 1


def test_the_newest_kernel_message_or_the_last_activity_seen_counts() -> None:
    kernels = [Kernel(False, NOW - 100), Kernel(False, None)]
    assert judge(kernels, NOW - 2000, False, NOW, IDLE).active_at == NOW - 100
    assert judge([], NOW - 50, False, NOW, IDLE).active_at == NOW - 50
    assert not judge([], NOW - IDLE + 1, False, NOW, IDLE).stop


def test_the_idle_message_says_when_kernels_alone_decided() -> None:
    said = idle_message(1800, gpu_reports=True)
    assert said.startswith("Stopped after 30 min idle: no kernel activity and 0 % GPU")
    assert "resume" in said and "declared" not in said
    assert "kernel activity alone decided" in idle_message(20, gpu_reports=False)
    assert idle_message(20, gpu_reports=False).startswith("Stopped after 20 s idle")


def test_the_token_is_never_on_the_command_line() -> None:
    command = launch_command("/venv/bin/python", 7)
    assert command[:2] == ["/bin/sh", "-c"] and command[3] == "/venv/bin/python"
    assert "--ServerApp.base_url=/notebooks/7/" in command
    assert not any("token" in part.lower() for part in command[3:])
    assert "$JUPYTER_TOKEN" in command[2]  # checked to be set: never one JupyterLab makes up
    assert '"$GPUPOOL_LISTEN_HOST"' in command[2] and '"$PORT"' in command[2]
    assert token_env("s3cret") == {TOKEN_ENV: "s3cret"}


def test_a_request_reads_blank_names_as_none_and_refuses_unknown_fields() -> None:
    assert NotebookRequest(name="  ", team="").name is None
    with pytest.raises(ValueError):
        NotebookRequest.model_validate({"gpu": 1})
    with pytest.raises(ValueError):
        NotebookRequest.model_validate({"resources": {"gpus": 1.5}})
