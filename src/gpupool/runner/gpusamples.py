"""Samples of a job's GPUs for its metrics: utilisation (%) and memory used (bytes), per GPU.

Stdlib only; NVML (nvidia-ml-py) is imported on the first sample, never before the job runs.
The source is the node's GPU sampler setting, as for the GPU memory watch
(``gpupool.runner.gpumemory``): ``nvml``, or ``file:PATH`` for a JSON file another program
keeps, ``{"GPU-uuid": {"utilization": 37, "memory_used": 1073741824, ...}}`` (a stand-in for
NVML in tests; the memory watch's per-PID entries may share the file). GPUs that NVML does not
know (declared in the config) give no samples.
"""

from __future__ import annotations

from gpupool.runner import gpusource, layout

Sample = dict[str, float]  # "utilization" -> %, "memory_used" -> bytes
KINDS = ("utilization", "memory_used")


class NvmlDevices:
    """Utilisation and memory of GPUs by UUID, from NVML; nothing where NVML is absent."""

    def __init__(self) -> None:
        self.nvml = None
        self.broken = False
        self._handles: dict[str, object] = {}

    def sample(self, uuids: list[str]) -> dict[str, Sample]:
        nvml = self._nvml()
        if nvml is None:
            return {}
        found = {}
        for uuid in uuids:
            sample = self._one(nvml, uuid)
            if sample:
                found[uuid] = sample
        return found

    def _nvml(self):  # noqa: ANN202 - the pynvml module, or None
        if self.nvml is None and not self.broken:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
            except Exception:  # noqa: BLE001 - not installed, no driver: no samples
                self.broken = True
        return self.nvml

    def _one(self, nvml, uuid: str) -> Sample:  # noqa: ANN001
        try:
            handle = self._handles.get(uuid) or nvml.nvmlDeviceGetHandleByUUID(uuid)
            self._handles[uuid] = handle
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        except nvml.NVMLError:
            return {}
        return {"utilization": float(rates.gpu), "memory_used": float(memory.used)}


class FileDevices:
    """Utilisation and memory of GPUs by UUID, read from a JSON file at each sample."""

    def __init__(self, path: str) -> None:
        self.path = path

    def sample(self, uuids: list[str]) -> dict[str, Sample]:
        data = layout.read_json(self.path)
        if data is None:
            return {}
        found = {}
        for uuid in uuids:
            entry = data.get(uuid)
            sample = _numbers(entry) if isinstance(entry, dict) else {}
            if sample:
                found[uuid] = sample
        return found


def devices(source: str | None) -> NvmlDevices | FileDevices | None:
    """The sampler for ``nvml`` or ``file:PATH``; None for no source (or an unknown one)."""
    parsed = gpusource.parse(source)
    if parsed is None:
        return None
    kind, path = parsed
    return NvmlDevices() if kind == gpusource.NVML else FileDevices(path)


def points(samples: dict[str, Sample], uuids: list[str], at: float) -> list[list[object]]:
    """Records ``[name, None, at, value]`` named by each GPU's index in the job
    (its ``CUDA_VISIBLE_DEVICES`` order): ``gpu.0.utilization``, ``gpu.0.memory_used``."""
    found = []
    for index, uuid in enumerate(uuids):
        sample = samples.get(uuid) or {}
        for kind in KINDS:
            if kind in sample:
                found.append([f"gpu.{index}.{kind}", None, at, sample[kind]])
    return found


def _numbers(entry: dict[str, object]) -> Sample:
    sample = {}
    for kind in KINDS:
        value = entry.get(kind)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            sample[kind] = float(value)
    return sample
