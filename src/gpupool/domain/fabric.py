"""The fabric that joins nodes, and the NCCL settings that put a task's traffic on it.

Three pure parts, all over a node's :class:`~gpupool.domain.inventory.NodeInventory`:

* :func:`fabric_group`: which fabric a node is on. A declared group (a setting) wins; else
  the node's active RDMA ports decide (InfiniBand first, then RoCE); else the IP subnet of
  its main NIC. Nodes with equal ``key`` are on one fabric.
* :func:`nccl_settings`: the NCCL environment of one task: the RDMA ports closest to its
  GPUs (``NCCL_IB_HCA``), the RoCE GID index, the bootstrap interface, or TCP with
  ``NCCL_IB_DISABLE=1`` and a sentence saying so for the job's events.
* :func:`fabrics_for_gang`: which fabric groups could hold a multi-node gang; a gang never
  spans groups unless the job allows it (``allow_cross_fabric``).

NCCL's variables as its documentation (docs.nvidia.com/deeplearning/nccl, "Environment
Variables") defines them: ``NCCL_IB_HCA`` takes ``=dev:port,...`` where the leading ``=``
asks for exact names (without it ``mlx5_1`` would also match ``mlx5_10``);
``NCCL_SOCKET_IFNAME=`` likewise; ``NCCL_IB_GID_INDEX`` picks the GID table entry RoCE
traffic uses; ``NCCL_IB_DISABLE=1`` keeps NCCL off the IB/RoCE transport.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.inventory import GpuDevice, LinkKind, NodeInventory, RdmaGid

# Without a GID table, RoCE uses index 3: in the mlx5 driver's default table a port's
# entries are RoCE v1 link-local (0), RoCE v2 link-local (1), RoCE v1 IPv4 (2) and RoCE v2
# IPv4 (3) -- the layout of every RoCE port in ../shared's ibv_devinfo capture. RoCE v2
# over IPv4 is the routable one NCCL wants across subnets.
ROCE_V2_IPV4_GID_INDEX = 3
_LINK_ORDER = list(LinkKind)  # NVLINK, PIX, PXB, PHB, NODE, SYS: nearest first
_DIGITS = re.compile(r"(\d+)")


class FabricKind(StrEnum):
    """What carries a gang's traffic between nodes, fastest first."""

    INFINIBAND = "infiniband"
    ROCE = "roce"  # RDMA over Converged Ethernet
    TCP = "tcp"  # no usable RDMA: NCCL's sockets over the IP network

    @property
    def order(self) -> int:
        return list(FabricKind).index(self)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeAddress(_Frozen):
    """A node's main NIC as its agent sees it: the address the other nodes reach it at."""

    address: str
    prefix_length: int = Field(ge=0, le=128)
    interface: str | None = None  # e.g. "eth0"; NCCL's bootstrap interface when known


class FabricGroup(_Frozen):
    """The fabric a node is on. Nodes with the same ``key`` can run one gang together."""

    key: str  # e.g. "infiniband:fe80::/64:400", "roce:10.0.0.0/24:400", "tcp:10.0.0.0/24"
    name: str  # for people: "InfiniBand 400 Gb/s (subnet fe80::/64)"
    kind: FabricKind  # what the node's hardware offers, even when the group is declared
    rate_gbps: float | None = None  # the fastest usable port (RDMA) or the main NIC (TCP)
    declared: bool = False


class NcclSettings(_Frozen):
    """One task's NCCL environment, a sentence for the job's events, and how it was chosen."""

    env: dict[str, str]
    summary: str  # "runs over TCP on eth0 at 25 Gb/s"
    notes: tuple[str, ...] = ()


class GangCandidate(_Frozen):
    """A node the scheduler could use for a gang, with how many of its tasks fit there now."""

    node: str
    group: FabricGroup
    tasks: int = Field(ge=0)


class GangFabric(_Frozen):
    """Nodes of one fabric group that together hold the gang (``group`` None: across
    groups, offered only when the job allows it)."""

    group: FabricGroup | None
    nodes: tuple[str, ...]
    tasks: int


@dataclass(frozen=True)
class RdmaEndpoint:
    """One usable RDMA port of a node."""

    device: str
    port: int
    kind: FabricKind
    rate_gbps: float | None
    numa_node: int | None
    gids: tuple[RdmaGid, ...]

    @property
    def spec(self) -> str:
        return f"{self.device}:{self.port}"


# -- (a) fabric groups -----------------------------------------------------------------------


def fabric_group(
    inventory: NodeInventory, address: NodeAddress | None = None, declared: str | None = None
) -> FabricGroup:
    """The node's fabric group.

    1. ``declared`` (an admin's setting string), when not blank: its text is the group.
    2. Active InfiniBand ports: the IB subnet prefixes of their GIDs (entry 0) and their
       fastest rate. Different rates are different groups: a gang runs at its slowest link.
       Two separate IB fabrics that both keep the default prefix fe80:: look alike: declare
       their groups.
    3. Active RoCE ports: the main NIC's IP subnet and the ports' fastest rate.
    4. Else TCP: the main NIC's IP subnet ("unknown" when the address is not known).
    """
    derived = _derived_group(inventory, address)
    if declared is None or not declared.strip():
        return derived
    name = declared.strip()
    return derived.model_copy(update={"key": f"declared:{name}", "name": name, "declared": True})


def rdma_endpoints(inventory: NodeInventory, kind: FabricKind) -> list[RdmaEndpoint]:
    """The node's active ports of one RDMA kind, in device-name order (mlx5_2 before
    mlx5_10)."""
    found: list[RdmaEndpoint] = []
    for device in sorted(inventory.rdma, key=lambda d: natural_key(d.name)):
        for port in sorted(device.ports, key=lambda p: p.port):
            if _port_kind(port.link_layer) is kind and _is_active(port.state):
                gids = tuple(port.gids)
                endpoint = RdmaEndpoint(
                    device.name, port.port, kind, port.rate_gbps, device.numa_node, gids
                )
                found.append(endpoint)
    return found


def best_rdma(inventory: NodeInventory) -> list[RdmaEndpoint]:
    """The active ports of the best RDMA kind the node has (InfiniBand, else RoCE)."""
    return rdma_endpoints(inventory, FabricKind.INFINIBAND) or rdma_endpoints(
        inventory, FabricKind.ROCE
    )


def _derived_group(inventory: NodeInventory, address: NodeAddress | None) -> FabricGroup:
    endpoints = best_rdma(inventory)
    subnet = _subnet(address)
    if not endpoints:
        rate = _nic_rate(inventory, address.interface if address else None)
        return FabricGroup(
            key=f"tcp:{subnet}", name=f"TCP on {subnet}", kind=FabricKind.TCP, rate_gbps=rate
        )
    rate = max((e.rate_gbps for e in endpoints if e.rate_gbps is not None), default=None)
    speed = f"{rate:g}" if rate is not None else "unknown"
    if endpoints[0].kind is FabricKind.ROCE:
        name = f"RoCE {_gbps(rate)} on {subnet}"
        return FabricGroup(
            key=f"roce:{subnet}:{speed}", name=name, kind=FabricKind.ROCE, rate_gbps=rate
        )
    prefixes = "+".join(sorted({_ib_prefix(e.gids) for e in endpoints}))
    name = f"InfiniBand {_gbps(rate)} (subnet {prefixes})"
    key = f"infiniband:{prefixes}:{speed}"
    return FabricGroup(key=key, name=name, kind=FabricKind.INFINIBAND, rate_gbps=rate)


def _subnet(address: NodeAddress | None) -> str:
    if address is None:
        return "unknown"
    try:
        interface = ipaddress.ip_interface(f"{address.address}/{address.prefix_length}")
    except ValueError:
        return "unknown"
    return str(interface.network)


def _ib_prefix(gids: Sequence[RdmaGid]) -> str:
    """The 64-bit subnet prefix of a port's GID 0 as a network ("fe80::/64")."""
    first = next((gid for gid in gids if gid.index == 0), None)
    try:
        value = int(ipaddress.IPv6Address(first.gid)) if first else None
    except ValueError:
        value = None
    if value is None:
        return "unknown"
    return str(ipaddress.IPv6Network(((value >> 64) << 64, 64)))


# -- (b) NCCL settings -----------------------------------------------------------------------


def nccl_settings(
    inventory: NodeInventory,
    gpu_indices: Iterable[int],
    address: NodeAddress | None = None,
    over: FabricKind | None = None,
) -> NcclSettings:
    """NCCL's environment for a task given GPUs ``gpu_indices`` of this node.

    ``over`` is the fabric the whole gang shares (see :func:`common_kind`); None means the
    best this node has. The RDMA ports chosen are those closest to the task's GPUs: by the
    ``nvidia-smi topo -m`` affinity when every GPU has one (each GPU's nearest devices:
    PIX, then PXB, PHB, NODE, SYS); else those on the GPUs' NUMA nodes; else all of them.
    A CPU-only task gets all of them. With no usable RDMA: TCP, ``NCCL_IB_DISABLE=1``.
    """
    gpus = _gpus(inventory, gpu_indices)  # ValueError for a GPU the node does not have
    endpoints = _endpoints_over(inventory, over)
    socket = (
        {"NCCL_SOCKET_IFNAME": f"={address.interface}"} if address and address.interface else {}
    )
    if not endpoints:
        return _tcp_settings(inventory, address, socket, rdma_off=bool(best_rdma(inventory)))
    chosen, how = closest_endpoints(endpoints, gpus)
    env = {"NCCL_IB_HCA": "=" + ",".join(e.spec for e in chosen), **socket}
    notes = [how]
    if chosen[0].kind is FabricKind.ROCE:
        index, note = roce_gid_index(chosen)
        env["NCCL_IB_GID_INDEX"] = str(index)
        notes += [note] if note else []
    return NcclSettings(env=env, summary=_rdma_summary(chosen), notes=tuple(notes))


def common_kind(groups: Iterable[FabricGroup]) -> FabricKind:
    """The fabric a gang on nodes of these groups can share: their kind when they all have
    the same one, else TCP (an InfiniBand port cannot reach a RoCE one, nor either a node
    without RDMA)."""
    kinds = {group.kind for group in groups}
    return kinds.pop() if len(kinds) == 1 else FabricKind.TCP


def closest_endpoints(
    endpoints: Sequence[RdmaEndpoint], gpus: Sequence[GpuDevice]
) -> tuple[list[RdmaEndpoint], str]:
    """The endpoints nearest to ``gpus`` and a note saying how they were chosen."""
    if not gpus:
        return list(endpoints), "all active RDMA ports: the task has no GPU"
    by_affinity = _by_affinity(endpoints, gpus)
    if by_affinity:
        return by_affinity, "RDMA ports nearest the task's GPUs by nvidia-smi topo -m"
    numa = {gpu.numa_node for gpu in gpus if gpu.numa_node is not None}
    by_numa = [e for e in endpoints if e.numa_node is not None and e.numa_node in numa]
    if by_numa:
        return by_numa, "RDMA ports on the NUMA nodes of the task's GPUs"
    return list(endpoints), "all active RDMA ports: no GPU-to-NIC affinity or NUMA node known"


def roce_gid_index(endpoints: Sequence[RdmaEndpoint]) -> tuple[int, str | None]:
    """The GID index RoCE traffic uses, and a note when it is assumed or not shared.

    Each port's RoCE v2 entry holding an IPv4 address (::ffff:a.b.c.d) wins, else its first
    RoCE v2 entry that is not link-local; NCCL takes one index for all ports, so the most
    common one is used. A port without a GID table in the inventory counts for nothing;
    when no port has one the index is ROCE_V2_IPV4_GID_INDEX (3).
    """
    found = [index for e in endpoints if (index := _roce_v2_index(e.gids)) is not None]
    if not found:
        return ROCE_V2_IPV4_GID_INDEX, (
            f"GID index {ROCE_V2_IPV4_GID_INDEX} assumed (RoCE v2 over IPv4 in the mlx5 "
            "driver's default GID table): the inventory has no GID table"
        )
    counts = Counter(found)
    index = max(sorted(counts), key=lambda i: counts[i])
    if len(counts) == 1:
        return index, None
    return index, f"the ports' RoCE v2 GID indexes differ ({sorted(counts)}): NCCL uses {index}"


def _roce_v2_index(gids: Sequence[RdmaGid]) -> int | None:
    v2 = [gid for gid in gids if gid.type and "v2" in gid.type.lower()]
    parsed = [(gid.index, _ipv6(gid.gid)) for gid in v2]
    ipv4 = [index for index, address in parsed if address and address.ipv4_mapped]
    routable = [index for index, address in parsed if address and not address.is_link_local]
    return (ipv4 or routable or [None])[0]


def _ipv6(text: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def _endpoints_over(inventory: NodeInventory, over: FabricKind | None) -> list[RdmaEndpoint]:
    if over is None:
        return best_rdma(inventory)
    return [] if over is FabricKind.TCP else rdma_endpoints(inventory, over)


def _by_affinity(
    endpoints: Sequence[RdmaEndpoint], gpus: Sequence[GpuDevice]
) -> list[RdmaEndpoint]:
    """Each GPU's nearest devices among the endpoints' (empty when a GPU has no affinity to
    any of them: then affinity cannot decide)."""
    devices = {e.device for e in endpoints}
    chosen: set[str] = set()
    for gpu in gpus:
        known = {dev: kind for dev, kind in gpu.nic_affinity.items() if dev in devices}
        if not known:
            return []
        best = min(_LINK_ORDER.index(kind) for kind in known.values())
        chosen |= {dev for dev, kind in known.items() if _LINK_ORDER.index(kind) == best}
    return [e for e in endpoints if e.device in chosen]


def _tcp_settings(
    inventory: NodeInventory, address: NodeAddress | None, socket: dict[str, str], rdma_off: bool
) -> NcclSettings:
    interface = address.interface if address else None
    rate = _nic_rate(inventory, interface)
    where = f"on {interface}" if interface else "on the interface NCCL picks"
    speed = f" at {_gbps(rate)}" if rate is not None else " (link speed unknown)"
    notes = ("RDMA is off: the gang's nodes share no RDMA fabric",) if rdma_off else ()
    env = {"NCCL_IB_DISABLE": "1", **socket}
    return NcclSettings(env=env, summary=f"runs over TCP {where}{speed}", notes=notes)


def _rdma_summary(chosen: Sequence[RdmaEndpoint]) -> str:
    fabric = "InfiniBand" if chosen[0].kind is FabricKind.INFINIBAND else "RoCE"
    rates = {e.rate_gbps for e in chosen}
    if len(rates) == 1:
        (rate,) = rates
        each = "" if rate is None else f" at {_gbps(rate)}" + (" each" if len(chosen) > 1 else "")
        return f"runs over {fabric} through {_and([e.spec for e in chosen])}{each}"
    ports = [e.spec + (f" ({_gbps(e.rate_gbps)})" if e.rate_gbps else "") for e in chosen]
    return f"runs over {fabric} through {_and(ports)}"


# -- (c) gangs and fabric groups -------------------------------------------------------------


def fabrics_for_gang(
    candidates: Iterable[GangCandidate], task_count: int, allow_cross_fabric: bool = False
) -> list[GangFabric]:
    """The fabric groups whose candidate nodes together hold ``task_count`` tasks, fastest
    first (InfiniBand, RoCE, TCP; then by rate; then by room). With ``allow_cross_fabric``,
    all candidates together come last, when they hold the gang and span several groups."""
    groups: dict[str, list[GangCandidate]] = {}
    for candidate in candidates:
        groups.setdefault(candidate.group.key, []).append(candidate)
    choices = [_gang_fabric(members[0].group, members) for members in groups.values()]
    fitting = sorted((c for c in choices if c.tasks >= task_count), key=_fastest)
    everyone = [m for members in groups.values() for m in members]
    if allow_cross_fabric and len(groups) > 1 and sum(m.tasks for m in everyone) >= task_count:
        fitting.append(_gang_fabric(None, everyone))
    return fitting


def why_no_fabric(
    candidates: Iterable[GangCandidate], task_count: int, allow_cross_fabric: bool = False
) -> str | None:
    """A sentence for a pending gang that no fabric group can hold; None when one can."""
    candidates = list(candidates)
    if fabrics_for_gang(candidates, task_count, allow_cross_fabric):
        return None
    groups = [c for c in fabrics_for_gang(candidates, 0) if c.group is not None]
    room = ", ".join(f"{c.group.name}: {c.tasks}" for c in groups if c.group) or "no nodes"
    hint = "" if allow_cross_fabric else "; allow_cross_fabric lets it span fabric groups"
    return f"no fabric group has room for its {task_count} tasks ({room}){hint}"


def _gang_fabric(group: FabricGroup | None, members: Sequence[GangCandidate]) -> GangFabric:
    nodes = tuple(sorted({m.node for m in members}, key=natural_key))
    return GangFabric(group=group, nodes=nodes, tasks=sum(m.tasks for m in members))


def _fastest(choice: GangFabric) -> tuple[int, float, int, str]:
    group = choice.group
    assert group is not None  # only single-group choices are sorted
    return (group.kind.order, -(group.rate_gbps or 0.0), -choice.tasks, group.key)


# -- helpers ---------------------------------------------------------------------------------


def natural_key(name: str) -> list[object]:
    """Sort key that puts "mlx5_2" before "mlx5_10"."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(name)]


def _port_kind(link_layer: str | None) -> FabricKind | None:
    layer = (link_layer or "").strip().lower()
    return {"infiniband": FabricKind.INFINIBAND, "ethernet": FabricKind.ROCE}.get(layer)


def _is_active(state: str | None) -> bool:
    """sysfs writes "ACTIVE", ibstat "Active", ibv_devinfo "PORT_ACTIVE"."""
    return (state or "").strip().upper().removeprefix("PORT_") == "ACTIVE"


def _gpus(inventory: NodeInventory, indices: Iterable[int]) -> list[GpuDevice]:
    wanted = set(indices)
    missing = wanted - {gpu.index for gpu in inventory.gpus}
    if missing:
        raise ValueError(f"node {inventory.name} has no GPU {sorted(missing)}")
    return [gpu for gpu in inventory.gpus if gpu.index in wanted]


def _nic_rate(inventory: NodeInventory, interface: str | None) -> float | None:
    nic = next((n for n in inventory.nics if n.name == interface), None)
    return nic.speed_mbps / 1000 if nic and nic.speed_mbps else None


def _gbps(rate: float | None) -> str:
    return "an unknown rate" if rate is None else f"{rate:g} Gb/s"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
