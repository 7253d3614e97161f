"""Parsing and formatting of byte quantities ("20GiB", "512M") and durations ("2h", "90s")."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}

GiB = 1024**3
MiB = 1024**2


def parse_bytes(text: object) -> int:
    """Return a byte count from "20GiB", "1.5G", "512MiB" or a plain number; ValueError if not."""
    if isinstance(text, bool):
        raise ValueError("a byte quantity must be a number or a string like '20GiB'")
    if isinstance(text, int | float):
        if text != text or text < 0:  # NaN or negative
            raise ValueError("a byte quantity must be a non-negative number")
        return int(text)
    if not isinstance(text, str):
        raise ValueError("a byte quantity must be a number or a string like '20GiB'")
    match = _PATTERN.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"'{text}' is not a byte quantity; write it like 20GiB, 512MiB or 1.5GB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_bytes(count: int | None) -> str:
    """Format a byte count with binary units: 85899345920 -> '80 GiB'."""
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "30m", "2h" or "1d"; ValueError if it is none of these."""
    match = _DURATION.match(text.lower())
    if not match:
        raise ValueError(f"'{text}' is not a duration; write it like 90, 90s, 30m, 2h or 1d")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest exact form of a duration: 90 -> '90s', 7200 -> '2h', 5400 -> '90m'."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{_number(seconds / size)}{unit}"
    return f"{_number(seconds)}s"


def _number(value: float) -> str:
    """Every digit of the value ('g' keeps six: 1000001 would read '1e+06')."""
    return str(int(value)) if value == int(value) else repr(float(value))
