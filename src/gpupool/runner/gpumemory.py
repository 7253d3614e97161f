"""Holding a fractional job to its share of GPU memory (stdlib only; NVML imported on use).

The runner samples the GPU memory each process uses on the job's GPUs, counts the processes
that belong to the job, and stops a job that stays over its share for ``grace_seconds``.
Samples come from NVML (``nvmlDeviceGetComputeRunningProcesses``: host PIDs and bytes), or,
where a machine has no GPU driver, from a JSON file another program keeps
(``{"GPU-uuid": {"pid": bytes}}``): a stand-in for NVML in tests and declared inventories.
"""

from __future__ import annotations

from gpupool.runner import gpusource, layout


class SamplerError(Exception):
    """GPU memory cannot be sampled here; the message says why."""


class NvmlSampler:
    """Per-process GPU memory from NVML (nvidia-ml-py), imported only by jobs that need it."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as e:
            raise SamplerError("nvidia-ml-py is not installed") from e
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as e:
            raise SamplerError(f"NVML is not available: {e}") from e
        self.nvml = pynvml
        self._handles: dict[str, object] = {}

    def sample(self, uuids: list[str]) -> dict[str, dict[int, int]]:
        found: dict[str, dict[int, int]] = {}
        for uuid in uuids:
            found[uuid] = self._processes(uuid)
        return found

    def _processes(self, uuid: str) -> dict[int, int]:
        nvml = self.nvml
        try:
            handle = self._handles.get(uuid) or nvml.nvmlDeviceGetHandleByUUID(uuid)
            self._handles[uuid] = handle
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError:
            return {}
        return {p.pid: int(p.usedGpuMemory or 0) for p in processes}


class FileSampler:
    """Per-process GPU memory read from a JSON file: ``{"GPU-uuid": {"pid": bytes}}``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def sample(self, uuids: list[str]) -> dict[str, dict[int, int]]:
        data = layout.read_json(self.path)
        if data is None:
            return {}
        return {uuid: _pids(data.get(uuid)) for uuid in uuids}


def sampler(source: str) -> NvmlSampler | FileSampler:
    """``nvml``, or ``file:PATH``."""
    parsed = gpusource.parse(source)
    if parsed is None:
        raise SamplerError(f"unknown GPU memory sampler {source!r}: use nvml or file:PATH")
    kind, path = parsed
    return NvmlSampler() if kind == gpusource.NVML else FileSampler(path)


class GpuMemoryWatch:
    """Decides when a job has been over its GPU memory share for long enough to stop it.

    ``limits``: GPU UUID -> the bytes the job may use there. ``belongs``: whether a host PID
    is one of the job's processes.
    """

    def __init__(self, limits: dict[str, int], source, grace_seconds: float) -> None:  # noqa: ANN001
        self.limits = limits
        self.source = source
        self.grace_seconds = grace_seconds
        self.over_since: dict[str, float] = {}
        self.peak: dict[str, int] = {}

    def check(self, now: float, belongs) -> dict[str, object] | None:  # noqa: ANN001
        """The excess to record when the job must stop now, else None."""
        used = self.used(belongs)
        for uuid, limit in self.limits.items():
            bytes_used = used.get(uuid, 0)
            self.peak[uuid] = max(self.peak.get(uuid, 0), bytes_used)
            if bytes_used <= limit:
                self.over_since.pop(uuid, None)
                continue
            since = self.over_since.setdefault(uuid, now)
            if now - since >= self.grace_seconds:
                return excess(uuid, bytes_used, limit, now - since)
        return None

    def used(self, belongs) -> dict[str, int]:  # noqa: ANN001
        samples = self.source.sample(list(self.limits))
        return {
            uuid: sum(b for pid, b in by_pid.items() if belongs(pid))
            for uuid, by_pid in samples.items()
        }


def excess(uuid: str, used: int, limit: int, seconds: float) -> dict[str, object]:
    message = (
        f"used {_gib(used)} of GPU memory on {uuid} for {seconds:.0f} s, over its share of "
        f"{_gib(limit)}; stopped. Ask for more GPU memory (--gpu-memory) or a larger share"
    )
    return {
        "reason": "GpuMemoryExceeded",
        "gpu": uuid,
        "used_bytes": used,
        "limit_bytes": limit,
        "seconds": round(seconds, 1),
        "message": message,
    }


def _pids(value: object) -> dict[int, int]:
    if not isinstance(value, dict):
        return {}
    found = {}
    for pid, used in value.items():
        if str(pid).isdigit() and isinstance(used, int):
            found[int(pid)] = used
    return found


def _gib(value: int) -> str:
    return f"{value / 1024**3:.1f} GiB"
