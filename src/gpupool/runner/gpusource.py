"""Where a node's GPU samples come from (stdlib only): its GPU sampler setting, ``nvml``, or
``file:PATH`` for a JSON file another program keeps, keyed by GPU UUID (a stand-in for NVML
in tests and declared inventories, read with ``layout.read_json``). The GPU memory watch
(``gpupool.runner.gpumemory``) and the job's GPU metrics (``gpupool.runner.gpusamples``) read
the same setting and the same file.
"""

from __future__ import annotations

NVML = "nvml"
FILE = "file:"


def parse(source: str | None) -> tuple[str, str] | None:
    """``(NVML, "")`` or ``(FILE, PATH)``; None for no source or an unknown one."""
    if source == NVML:
        return NVML, ""
    if source and source.startswith(FILE):
        return FILE, source.removeprefix(FILE)
    return None
