"""Nodes: what each node has, and who holds each GPU."""

from __future__ import annotations

from typing import Any

from gpupool.cli.output import (
    Output,
    OutputOption,
    err,
    escape,
    memory,
    new_table,
    out,
    print_json,
    share,
)
from gpupool.cli.session import connect


def holder_text(holder: dict[str, Any]) -> str:
    """'job 12 (alice, 0.5)'; "another team's job (0.5)" for a job of a team you are not in
    (the server withholds its id, name and user)."""
    if holder.get("other_team"):
        return f"another team's job ({share(holder['share'])})"
    return f"job {holder['job_id']} ({holder['user']}, {share(holder['share'])})"


def nic_text(nic: dict[str, Any]) -> str:
    """'eth0 25 Gb/s up mtu 9000 (rdma mlx5_0)'."""
    parts = [nic["name"]]
    if nic.get("speed_mbps"):
        parts.append(f"{nic['speed_mbps'] / 1000:g} Gb/s")
    if nic.get("operstate"):
        parts.append(nic["operstate"])
    if nic.get("mtu"):
        parts.append(f"mtu {nic['mtu']}")
    if nic.get("rdma_device"):
        parts.append(f"(rdma {nic['rdma_device']})")
    return " ".join(parts)


def rdma_text(device: dict[str, Any]) -> str:
    """'mlx5_0 port 1 InfiniBand 200 Gb/s ACTIVE'."""
    ports = []
    for port in device.get("ports", []):
        fields = [f"port {port['port']}", port.get("link_layer"), port.get("state")]
        if port.get("rate_gbps"):
            fields.insert(2, f"{port['rate_gbps']:g} Gb/s")
        ports.append(" ".join(f for f in fields if f))
    hca = f" ({device['hca_type']})" if device.get("hca_type") else ""
    return f"{device['name']}{hca}: " + ("; ".join(ports) or "no ports")


def print_node(node: dict[str, Any]) -> None:
    """One node: a header line, a GPU table, NIC and RDMA summary lines.

    DOMAIN is a GPU's connectivity domain, named by its lowest GPU index: GPUs of one domain
    share NVLink, a PCIe switch or a NUMA node, and a multi-GPU job gets one domain if it can.
    """
    state = "" if node["schedulable"] else "  [red]not schedulable[/red]"
    out.print(
        f"[bold]{escape(node['name'])}[/bold]  cpus {node['cpus']}  "
        f"memory {memory(node['memory_bytes'])}{state}"
    )
    table = new_table("GPU", "DOMAIN", "MODEL", "MEMORY", "USED", "HOLDERS")
    for gpu in node["gpus"]:
        table.add_row(
            str(gpu["index"]),
            str(gpu["domain"]),
            escape(gpu["model"]),
            memory(gpu["memory_bytes"]),
            share(gpu["used_share"]),
            escape(", ".join(holder_text(h) for h in gpu["holders"]) or "-"),
        )
    out.print(table)
    inventory = node.get("inventory") or {}
    if inventory.get("nics"):
        out.print("nics:  " + escape("; ".join(nic_text(n) for n in inventory["nics"])))
    for device in inventory.get("rdma") or []:
        out.print("rdma:  " + escape(rdma_text(device)))


ISOLATION_STYLE = {"sandbox": "", "off": "bold yellow", "unavailable": "bold red"}
NO_GPU_HINT = (
    "no GPU found: no node of the pool has a GPU that NVML or nvidia-smi could see, so jobs "
    "that ask for GPUs wait; on a host without a driver, declare them when starting the "
    "server: gpupool server --declare-gpus 4xA100, or GPUPOOL_DECLARED_GPUS=4xA100"
)


def nodes(output: OutputOption = Output.TABLE) -> None:
    """List nodes: CPUs, memory, and each GPU with its domain, used share and holders; then
    how jobs are kept apart (isolation)."""
    with connect() as client:
        found = client.nodes()
        isolation = client.isolation()
    if output == Output.JSON:
        print_json(found)
        return
    for number, node in enumerate(found):
        if number:
            out.print("")
        print_node(node)
    if not any(node["gpus"] for node in found):
        err.print(f"[yellow]{escape(NO_GPU_HINT)}[/yellow]")
    if isolation:
        print_isolation(isolation)


def print_isolation(isolation: dict[str, Any]) -> None:
    """'isolation: every job runs in a bubblewrap sandbox, as ...' (loud when it does not)."""
    style = ISOLATION_STYLE.get(isolation["mode"], "")
    text = escape(f"isolation ({isolation['mode']}): {isolation['message']}")
    out.print(f"\n[{style}]{text}[/{style}]" if style else f"\n{text}", soft_wrap=True)
