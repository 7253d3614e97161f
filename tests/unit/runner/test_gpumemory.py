"""The GPU memory watch of fractional jobs: NVML's per-process figures, the job's processes
only, stopped after the grace, with the figures."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from gpupool.runner.gpumemory import GpuMemoryWatch, NvmlSampler, SamplerError

GIB = 1024**3


class FakeNvml:
    """The part of nvidia-ml-py the sampler uses."""

    class NVMLError(Exception):
        pass

    def __init__(self, processes: dict[str, list[tuple[int, int | None]]]) -> None:
        self.processes = processes
        self.initialised = False

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        self.initialised = True

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        if uuid not in self.processes:
            raise self.NVMLError("not found")
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in self.processes[handle]]


def test_nvml_gives_each_process_memory_by_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml({"GPU-a": [(10, 3 * GIB), (11, None)], "GPU-b": []})
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = NvmlSampler()
    assert fake.initialised
    assert sampler.sample(["GPU-a", "GPU-b", "GPU-gone"]) == {
        "GPU-a": {10: 3 * GIB, 11: 0},
        "GPU-b": {},
        "GPU-gone": {},
    }


def test_without_nvml_the_sampler_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(SamplerError, match="nvidia-ml-py is not installed"):
        NvmlSampler()


class Samples:
    def __init__(self) -> None:
        self.now: dict[str, dict[int, int]] = {}

    def sample(self, uuids: list[str]) -> dict[str, dict[int, int]]:
        return {uuid: self.now.get(uuid, {}) for uuid in uuids}


def test_only_the_jobs_processes_count_and_only_after_the_grace() -> None:
    samples = Samples()
    watch = GpuMemoryWatch({"GPU-a": 20 * GIB}, samples, grace_seconds=5)
    mine = {100, 101}.__contains__
    samples.now = {"GPU-a": {100: 12 * GIB, 101: 6 * GIB, 999: 70 * GIB}}
    assert watch.check(0.0, mine) is None  # 18 GiB of its own: within its share
    samples.now = {"GPU-a": {100: 15 * GIB, 101: 10 * GIB}}
    assert watch.check(1.0, mine) is None  # over, not yet for long
    assert watch.check(5.5, mine) is None
    samples.now = {"GPU-a": {100: 10 * GIB}}
    assert watch.check(6.5, mine) is None  # back within: the clock starts again
    samples.now = {"GPU-a": {100: 25 * GIB}}
    assert watch.check(7.0, mine) is None
    excess = watch.check(12.0, mine)
    assert excess is not None and excess["reason"] == "GpuMemoryExceeded"
    assert (excess["used_bytes"], excess["limit_bytes"], excess["seconds"]) == (
        25 * GIB,
        20 * GIB,
        5.0,
    )
    assert "over its share of 20.0 GiB" in excess["message"]
