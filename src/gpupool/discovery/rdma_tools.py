"""RDMA devices from the text of ``ibv_devinfo -v`` and ``ibstat`` (pure parsers).

sysfs (:mod:`gpupool.discovery.sysfs`) is what discovery reads; these read the same facts
from the tools' output, for a node where ``/sys/class/infiniband`` is hidden (a container
given the device files only) and for captured outputs. Values are normalised to sysfs's
words: port state "ACTIVE", physical state "LinkUp", HCA type "MT4123", rate in Gb/s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpupool.domain.inventory import RdmaDevice, RdmaGid, RdmaPort, Source

_KEY_VALUE = re.compile(r"^\s*([^:]+?):\s*(.*?)\s*$")
_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s*([0-9a-fA-F:.]+)\s*(?:,\s*(.+?))?\s*$")
_CODE = re.compile(r"\s*\(\d+\)\s*$")  # the "(4)" after "PORT_ACTIVE"
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)")
_IBSTAT_CA = re.compile(r"^CA '([^']+)'")
_IBSTAT_PORT = re.compile(r"^\s*Port (\d+):\s*$")
# ibv_devinfo's physical states (verbs' IBV_PORT_* names) in sysfs's words
_PHYS_STATES = {
    "SLEEP": "Sleep",
    "POLLING": "Polling",
    "DISABLED": "Disabled",
    "PORT_CONFIGURATION_TRAINING": "PortConfigurationTraining",
    "LINK_UP": "LinkUp",
    "LINK_ERROR_RECOVERY": "LinkErrorRecovery",
    "PHY_TEST": "Phy Test",
}


@dataclass
class _Port:
    number: int
    values: dict[str, str] = field(default_factory=dict)
    gids: list[RdmaGid] = field(default_factory=list)


@dataclass
class _Device:
    name: str
    values: dict[str, str] = field(default_factory=dict)
    ports: list[_Port] = field(default_factory=list)


def parse_ibv_devinfo(text: str) -> list[RdmaDevice]:
    """Every ``hca_id:`` block of ``ibv_devinfo -v`` with its ports and filled GID entries."""
    devices: list[_Device] = []
    for line in text.splitlines():
        _ibv_line(devices, line)
    return [_ibv_device(device) for device in devices]


def parse_ibstat(text: str) -> list[RdmaDevice]:
    """Every ``CA '<name>'`` block of ``ibstat`` with its ports (ibstat shows no GIDs)."""
    devices: list[_Device] = []
    for line in text.splitlines():
        if match := _IBSTAT_CA.match(line):
            devices.append(_Device(match.group(1)))
        elif devices and (match := _IBSTAT_PORT.match(line)):
            devices[-1].ports.append(_Port(int(match.group(1))))
        elif devices and (match := _KEY_VALUE.match(line)):
            target = devices[-1].ports[-1] if devices[-1].ports else devices[-1]
            target.values[match.group(1)] = match.group(2)
    return [_ibstat_device(device) for device in devices]


def _ibv_line(devices: list[_Device], line: str) -> None:
    if gid := _GID.match(line):
        if devices and devices[-1].ports and any(c not in "0:" for c in gid.group(2)):
            entry = RdmaGid(index=int(gid.group(1)), gid=gid.group(2), type=gid.group(3))
            devices[-1].ports[-1].gids.append(entry)
        return
    match = _KEY_VALUE.match(line)
    if match is None:
        return
    key, value = match.groups()
    if key == "hca_id":
        devices.append(_Device(value))
    elif devices and key == "port" and value.isdigit():
        devices[-1].ports.append(_Port(int(value)))
    elif devices:
        target = devices[-1].ports[-1] if devices[-1].ports else devices[-1]
        target.values.setdefault(key, value)


def _ibv_device(device: _Device) -> RdmaDevice:
    part = device.values.get("vendor_part_id")
    return RdmaDevice(
        name=device.name,
        hca_type=f"MT{part}" if part and part.isdigit() else None,
        fw_ver=device.values.get("fw_ver") or None,
        board_id=device.values.get("board_id") or None,
        ports=[_ibv_port(port) for port in device.ports],
        source=Source.RDMA_TOOLS,
    )


def _ibv_port(port: _Port) -> RdmaPort:
    state = _CODE.sub("", port.values.get("state", "")).removeprefix("PORT_")
    phys = _CODE.sub("", port.values.get("phys_state", ""))
    return RdmaPort(
        port=port.number,
        link_layer=port.values.get("link_layer") or None,
        rate_gbps=_ibv_rate(port.values.get("active_width"), port.values.get("active_speed")),
        state=state or None,
        phys_state=_PHYS_STATES.get(phys, phys) or None,
        gids=port.gids,
    )


def _ibv_rate(width: str | None, speed: str | None) -> float | None:
    """ "4X (2)" lanes at "50.0 Gbps (64)" each -> 200.0 Gb/s."""
    lanes, per_lane = _NUMBER.match(width or ""), _NUMBER.match(speed or "")
    if lanes is None or per_lane is None:
        return None
    return float(lanes.group(1)) * float(per_lane.group(1))


def _ibstat_device(device: _Device) -> RdmaDevice:
    return RdmaDevice(
        name=device.name,
        hca_type=device.values.get("CA type") or None,
        fw_ver=device.values.get("Firmware version") or None,
        ports=[_ibstat_port(port) for port in device.ports],
        source=Source.RDMA_TOOLS,
    )


def _ibstat_port(port: _Port) -> RdmaPort:
    rate = _NUMBER.match(port.values.get("Rate", ""))
    return RdmaPort(
        port=port.number,
        link_layer=port.values.get("Link layer") or None,
        rate_gbps=float(rate.group(1)) if rate else None,
        state=port.values.get("State", "").upper() or None,
        phys_state=port.values.get("Physical state") or None,
    )
