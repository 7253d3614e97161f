"""``nvidia-smi --query-gpu=... --format=csv`` with its header line."""

from __future__ import annotations

import csv
import re

from gpupool.discovery.nvidia_smi.values import NUMBER, clean, to_bytes, to_int, to_percent
from gpupool.discovery.pci import normalize_bus_id
from gpupool.discovery.report import GpuReport, present_fields
from gpupool.domain.inventory import GpuDevice, Source

_UNIT_HEADER = re.compile(r"^(?P<name>.*?)\s*\[(?P<unit>[^\]]+)\]\s*$")


def _column(name: str) -> tuple[str, str | None]:
    match = _UNIT_HEADER.match(name.strip())
    return (match["name"], match["unit"]) if match else (name.strip(), None)


def _csv_cell(value: str, unit: str | None) -> str | None:
    value = clean(value)
    if value is not None and unit and NUMBER.match(value):
        return f"{value} {unit}"  # --format=csv,nounits: the unit lives only in the header
    return value


def parse_query_gpu_csv(text: str) -> list[dict[str, str | None]]:
    """Parse ``--query-gpu=... --format=csv`` (with header) into one dict per GPU.

    Keys are the field names without units ("memory.total"); values keep their unit
    ("81559 MiB"); "[N/A]" and similar become None.
    """
    reader = csv.reader((line for line in text.splitlines() if line.strip()), skipinitialspace=True)
    columns = [_column(name) for name in next(reader, [])]
    return [
        {name: _csv_cell(value, unit) for (name, unit), value in zip(columns, row, strict=False)}
        for row in reader
    ]


def devices_from_query_rows(rows: list[dict[str, str | None]]) -> GpuReport:
    """Turn parsed ``--query-gpu`` rows into GPUs; rows without uuid or memory.total are skipped."""
    report = GpuReport(source=Source.NVIDIA_SMI)
    if rows and not {"uuid", "memory.total"} <= rows[0].keys():
        report.warnings.append("the --query-gpu CSV lacks the uuid or memory.total column")
        return report
    for position, row in enumerate(rows):
        gpu = query_row_gpu(position, row)
        if gpu is None:
            report.warnings.append(f"--query-gpu row {position} has no uuid or memory.total")
        else:
            report.gpus.append(gpu)
    report.driver_version = rows[0].get("driver_version") if rows else None
    return report


def query_row_gpu(position: int, row: dict[str, str | None]) -> GpuDevice | None:
    """Build a GpuDevice from one ``--query-gpu`` row; None without uuid or memory.total."""
    memory = to_bytes(row.get("memory.total"))
    if not row.get("uuid") or memory is None:
        return None
    index = to_int(row.get("index"))
    values = {
        "index": position if index is None else index,
        "uuid": row["uuid"],
        "name": row.get("name"),
        "memory_bytes": memory,
        "memory_used_bytes": to_bytes(row.get("memory.used")),
        "pci_bus_id": normalize_bus_id(row.get("pci.bus_id")),
        "utilization_percent": to_percent(row.get("utilization.gpu")),
        "mig_enabled": (row.get("mig.mode.current") or "").lower() == "enabled",
    }
    sources = present_fields(values, Source.NVIDIA_SMI)
    values["name"] = values["name"] or "unknown NVIDIA GPU"
    return GpuDevice(**values, sources=sources)
