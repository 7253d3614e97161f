"""Value cells of nvidia-smi output: "N/A", "[Not Supported]", "81920 MiB", "65 %"."""

from __future__ import annotations

import re

from gpupool.domain.units import parse_bytes

_MISSING = {"", "n/a", "not found", "not supported", "unknown error", "none", "unknown"}
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def clean(value: str | None) -> str | None:
    """Strip a value; None for nvidia-smi's "N/A", "[N/A]", "[Not Supported]", "Not Found"..."""
    value = (value or "").strip()
    if value.startswith("[") and value.endswith("]"):
        return None
    return None if value.lower() in _MISSING else value


def to_bytes(value: str | None) -> int | None:
    """ "81920 MiB" -> bytes; None for missing or unparsable values."""
    value = clean(value)
    try:
        return parse_bytes(value) if value else None
    except ValueError:
        return None


def to_percent(value: str | None) -> float | None:
    """ "65 %" -> 65.0; None for missing values."""
    value = (clean(value) or "").rstrip("%").strip()
    return float(value) if NUMBER.match(value) else None


def to_int(value: str | None) -> int | None:
    """ "3" -> 3; None for missing or non-integer values."""
    value = clean(value)
    return int(value) if value and value.lstrip("-").isdigit() else None
