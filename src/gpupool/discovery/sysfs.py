"""NICs and RDMA devices read from a sysfs tree (``/sys`` or a captured copy of it)."""

from __future__ import annotations

import re
from pathlib import Path

from gpupool.domain.inventory import Nic, RdmaDevice, RdmaGid, RdmaPort

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_DIGITS = re.compile(r"(\d+)")


def read_text(path: Path) -> str | None:
    """Return the stripped content of a sysfs file, or None when it cannot be read.

    Real sysfs raises EINVAL for some attributes (``speed`` of a link that is down).
    """
    try:
        return path.read_text(errors="replace").strip()
    except (OSError, ValueError):
        return None


def read_int(path: Path) -> int | None:
    """Return a sysfs file as an integer, or None when unreadable or not a number."""
    text = read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def natural_key(name: str) -> list[object]:
    """Sort key that puts "mlx5_2" before "mlx5_10"."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(name)]


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir(), key=lambda path: natural_key(path.name))
    except OSError:
        return []


def parse_rate_gbps(text: str | None) -> float | None:
    """ "400 Gb/sec (4X NDR)" -> 400.0; None when the text is not a rate."""
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


def parse_port_state(text: str | None) -> str | None:
    """ "4: ACTIVE" -> "ACTIVE", "5: LinkUp" -> "LinkUp"; None for missing text."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip() or None


def read_rdma_port(port_dir: Path) -> RdmaPort | None:
    """Read one ``ports/<n>`` directory of an RDMA device; None if the name is not a number."""
    if not port_dir.name.isdigit():
        return None
    return RdmaPort(
        port=int(port_dir.name),
        link_layer=read_text(port_dir / "link_layer") or None,
        rate_gbps=parse_rate_gbps(read_text(port_dir / "rate")),
        state=parse_port_state(read_text(port_dir / "state")),
        phys_state=parse_port_state(read_text(port_dir / "phys_state")),
        gids=read_gids(port_dir),
    )


def read_gids(port_dir: Path) -> list[RdmaGid]:
    """The filled entries of ``ports/<n>/gids``, with their ``gid_attrs`` type and netdev.

    The kernel lists every slot of the table (often 256); empty slots read as all zeros and
    their attributes fail with EINVAL, so they are left out.
    """
    gids: list[RdmaGid] = []
    for path in _entries(port_dir / "gids"):
        gid = read_text(path)
        if path.name.isdigit() and gid and any(c not in "0:" for c in gid):
            attrs = port_dir / "gid_attrs"
            gids.append(
                RdmaGid(
                    index=int(path.name),
                    gid=gid,
                    type=read_text(attrs / "types" / path.name) or None,
                    netdev=read_text(attrs / "ndevs" / path.name) or None,
                )
            )
    return gids


def read_rdma_device(device_dir: Path) -> RdmaDevice:
    """Read one ``class/infiniband/<dev>`` directory."""
    ports = [read_rdma_port(port) for port in _entries(device_dir / "ports")]
    return RdmaDevice(
        name=device_dir.name,
        hca_type=read_text(device_dir / "hca_type") or None,
        fw_ver=read_text(device_dir / "fw_ver") or None,
        board_id=read_text(device_dir / "board_id") or None,
        numa_node=_numa_node(device_dir / "device" / "numa_node"),
        ports=[port for port in ports if port is not None],
    )


def _numa_node(path: Path) -> int | None:
    node = read_int(path)
    return node if node is not None and node >= 0 else None  # -1: the platform has no NUMA


def read_infiniband_class(class_dir: Path) -> list[RdmaDevice]:
    """Read every RDMA device below a ``class/infiniband`` directory (empty if it is absent)."""
    return [read_rdma_device(path) for path in _entries(class_dir) if path.is_dir()]


def read_rdma_devices(sysfs_root: Path) -> list[RdmaDevice]:
    """Read the RDMA devices of ``<sysfs_root>/class/infiniband``."""
    return read_infiniband_class(sysfs_root / "class" / "infiniband")


def rdma_netdevs(sysfs_root: Path) -> dict[str, str]:
    """Map netdev name -> RDMA device, from ``class/infiniband/<dev>/device/net/*``."""
    mapping: dict[str, str] = {}
    for device in _entries(sysfs_root / "class" / "infiniband"):
        for netdev in _entries(device / "device" / "net"):
            mapping.setdefault(netdev.name, device.name)
    return mapping


def read_nic(net_dir: Path, rdma_device: str | None = None) -> Nic:
    """Read one ``class/net/<name>`` directory; speed -1 or unreadable -> None."""
    speed = read_int(net_dir / "speed")
    return Nic(
        name=net_dir.name,
        speed_mbps=speed if speed is not None and speed >= 0 else None,
        operstate=read_text(net_dir / "operstate") or None,
        mtu=read_int(net_dir / "mtu"),
        rdma_device=rdma_device,
    )


def read_nics(sysfs_root: Path) -> list[Nic]:
    """Read the network interfaces of ``<sysfs_root>/class/net``, skipping ``lo``."""
    rdma = rdma_netdevs(sysfs_root)
    net_dirs = _entries(sysfs_root / "class" / "net")
    return [read_nic(path, rdma.get(path.name)) for path in net_dirs if path.name != "lo"]
