"""PCI bus ids: the NVML form ("00000000:1A:00.0") and the Linux sysfs form ("0000:1a:00.0")."""

from __future__ import annotations

import re
from pathlib import Path

_BUS_ID = re.compile(
    r"^\s*(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])\s*$"
)


def _parts(bus_id: str) -> tuple[int, int, int, int] | None:
    match = _BUS_ID.match(bus_id)
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    return (
        domain,
        int(match.group("bus"), 16),
        int(match.group("device"), 16),
        int(match.group("function")),
    )


def normalize_bus_id(bus_id: str | bytes | None) -> str | None:
    """Return the NVML form "DDDDDDDD:BB:DD.F" (upper case), or None if ``bus_id`` is no bus id."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    parts = _parts(bus_id or "")
    if parts is None:
        return None
    return "{:08X}:{:02X}:{:02X}.{}".format(*parts)


def sysfs_bus_id(bus_id: str) -> str | None:
    """Return the name Linux gives the device under /sys/bus/pci/devices ("0000:1a:00.0")."""
    parts = _parts(bus_id)
    if parts is None:
        return None
    return "{:04x}:{:02x}:{:02x}.{}".format(*parts)


def read_numa_node(sysfs_root: Path, bus_id: str | None) -> int | None:
    """Read ``bus/pci/devices/<id>/numa_node``; None when absent, unreadable or -1."""
    name = sysfs_bus_id(bus_id) if bus_id else None
    if name is None:
        return None
    try:
        node = int((sysfs_root / "bus" / "pci" / "devices" / name / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
