"""What a node has: GPUs (and MIG instances), GPU links, NICs, RDMA devices, CPUs, memory.

Every field says where it came from (``sources``), so nothing is guessed silently.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Source(StrEnum):
    """Where a discovered value came from."""

    NVML = "nvml"
    NVIDIA_SMI = "nvidia-smi"
    SYSFS = "sysfs"
    PSUTIL = "psutil"
    RDMA_TOOLS = "rdma-tools"  # the text of ibv_devinfo or ibstat
    DECLARED = "declared"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MigDevice(_Model):
    """A MIG instance: scheduled like a whole GPU of its own (compute share 1.0)."""

    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None  # e.g. "1g.10gb"
    memory_bytes: int
    sm_count: int | None = None


class GpuDevice(_Model):
    index: int
    uuid: str
    name: str
    memory_bytes: int
    # the N of /dev/nvidiaN, the device node a job given this GPU (or its MIG devices) sees
    minor_number: int | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    mig_enabled: bool = False
    mig_devices: list[MigDevice] = Field(default_factory=list)
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    # RDMA device name ("mlx5_0") -> how this GPU reaches it: the NIC columns of
    # ``nvidia-smi topo -m`` (PIX/PXB/PHB/NODE/SYS); empty where nothing said
    nic_affinity: dict[str, LinkKind] = Field(default_factory=dict)
    sources: dict[str, Source] = Field(default_factory=dict)


class LinkKind(StrEnum):
    """How two GPUs are connected, fastest first (``nvidia-smi topo -m`` legend)."""

    NVLINK = "NVLINK"  # NV# in topo -m; count in ``nvlinks``
    PIX = "PIX"  # at most one PCIe bridge
    PXB = "PXB"  # several PCIe bridges, no host bridge
    PHB = "PHB"  # through a PCIe host bridge (same CPU)
    NODE = "NODE"  # across host bridges within one NUMA node
    SYS = "SYS"  # across NUMA nodes (SMP interconnect)


class GpuLink(_Model):
    a: int  # GPU index
    b: int  # GPU index
    kind: LinkKind
    nvlinks: int = 0
    source: Source


class RdmaGid(_Model):
    """One filled entry of a port's GID table (the all-zero entries are left out)."""

    index: int
    gid: str  # as the kernel writes it: "fe80:0000:0000:0000:0e42:a1ff:fe2b:07a4"
    type: str | None = None  # "IB/RoCE v1" or "RoCE v2" (sysfs), "RoCE v1"/"RoCE v2" (ibv)
    netdev: str | None = None  # the network interface a RoCE GID belongs to


class RdmaPort(_Model):
    port: int
    link_layer: str | None = None  # "InfiniBand" or "Ethernet" (RoCE)
    rate_gbps: float | None = None
    state: str | None = None  # e.g. "ACTIVE"
    phys_state: str | None = None  # e.g. "LinkUp"
    gids: list[RdmaGid] = Field(default_factory=list)


class RdmaDevice(_Model):
    name: str  # e.g. "mlx5_0"
    hca_type: str | None = None
    fw_ver: str | None = None
    board_id: str | None = None
    numa_node: int | None = None  # of its PCI device: NCCL settings pick NICs near the GPUs
    ports: list[RdmaPort] = Field(default_factory=list)
    source: Source = Source.SYSFS


class Nic(_Model):
    name: str
    speed_mbps: int | None = None
    operstate: str | None = None
    mtu: int | None = None
    rdma_device: str | None = None
    source: Source = Source.SYSFS


class NodeInventory(_Model):
    """Everything gpupool knows about one node."""

    name: str
    hostname: str | None = None
    cpus: int
    memory_bytes: int
    numa_nodes: int | None = None
    gpus: list[GpuDevice] = Field(default_factory=list)
    links: list[GpuLink] = Field(default_factory=list)
    nics: list[Nic] = Field(default_factory=list)
    rdma: list[RdmaDevice] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    sources: dict[str, Source] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)

    def schedulable_gpus(self) -> list[SchedulableGpu]:
        """The devices the scheduler hands out: whole GPUs, or MIG instances where MIG is on."""
        devices: list[SchedulableGpu] = []
        for gpu in self.gpus:
            if gpu.mig_enabled and gpu.mig_devices:
                for mig in gpu.mig_devices:
                    devices.append(
                        SchedulableGpu(
                            uuid=mig.uuid,
                            index=gpu.index,
                            model=f"{gpu.name} MIG {mig.profile or ''}".strip(),
                            memory_bytes=mig.memory_bytes,
                        )
                    )
            elif not gpu.mig_enabled:
                devices.append(
                    SchedulableGpu(
                        uuid=gpu.uuid,
                        index=gpu.index,
                        model=gpu.name,
                        memory_bytes=gpu.memory_bytes,
                    )
                )
        return devices


class SchedulableGpu(_Model):
    """One unit the scheduler places work on: a GPU or a MIG instance (compute share 1.0)."""

    uuid: str
    index: int  # index of the physical GPU
    model: str
    memory_bytes: int
