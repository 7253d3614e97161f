"""Nodes: what each node has, who holds each GPU, and each node's life in the pool (an
admin's drain, undrain and removal; the cluster's up and down)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gpupool.cli.connection import connect
from gpupool.cli.main import NODE_COMMANDS, group_over
from gpupool.cli.options import OutputOption
from gpupool.cli.output import (
    Output,
    err,
    escape,
    memory,
    new_table,
    out,
    print_json,
    share,
    timestamp,
)

node_app = typer.Typer(
    help="One node of the pool: show it; drain, undrain or remove it (admins).",
    cls=group_over(NODE_COMMANDS),
    no_args_is_help=True,
)
NodeName = Annotated[str, typer.Argument(help="The node's name, as 'gpupool nodes' lists it.")]


def holder_text(holder: dict[str, Any]) -> str:
    """'job 12 (alice, 0.5)'; "another team's job (0.5)" for a job of a team you are not in
    (the server withholds its id, name and user)."""
    if holder.get("other_team"):
        return f"another team's job ({share(holder['share'])})"
    return f"job {holder['job_id']} ({holder['user']}, {share(holder['share'])})"


def cpu_holder_text(holder: dict[str, Any]) -> str:
    """'job 12 (alice, 2 CPUs)'; "another team's job (2 CPUs)" for a job of a team you are
    not in."""
    cpus = f"{round(holder['cpus'], 2):g} CPU{'' if holder['cpus'] == 1 else 's'}"
    if holder.get("other_team"):
        return f"another team's job ({cpus})"
    return f"job {holder['job_id']} ({holder['user']}, {cpus})"


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
    out.print(escape(life_text(node)), soft_wrap=True)
    if node.get("cpu_holders"):
        held = ", ".join(cpu_holder_text(h) for h in node["cpu_holders"])
        out.print(f"cpus held by: {escape(held)}", soft_wrap=True)
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


def life_text(node: dict[str, Any]) -> str:
    """'state: up · drained (disk swap) · joined 2026-01-05 10:00:00 · fabric ib-0 · address
    10.0.0.2': how the node stands in the pool."""
    state = f"state: {node.get('state', 'up')}"
    if node.get("down_at") is not None:
        state += f" since {timestamp(node['down_at'])}"
    parts = [state]
    if node.get("drain"):
        reason = node.get("drain_reason")
        parts.append("drained" + (f" ({reason})" if reason else ""))
    parts.append(f"joined {timestamp(node.get('joined_at'))}")
    parts.append(f"fabric {node.get('fabric_group') or '-'}")
    if node.get("address"):
        parts.append(f"address {node['address']}")
    return " · ".join(parts)


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
        engine = client.cluster()
    warn_unreachable(engine)
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


def warn_unreachable(engine: dict[str, Any]) -> None:
    """One loud line (stderr) while the pool's Ray cluster does not answer: what is listed
    is as last seen, and jobs wait in the queue."""
    if engine.get("reachable", True):
        return
    problem = engine.get("problem") or "the Ray cluster is unreachable"
    since = engine.get("unreachable_since")
    when = f" (since {timestamp(since)})" if since is not None else ""
    text = (
        f"WARNING {problem}{when}: the nodes are shown as last seen; jobs are accepted and "
        "wait in the queue until the cluster answers again"
    )
    err.print(f"[bold yellow]{escape(text)}[/bold yellow]")


def print_isolation(isolation: dict[str, Any]) -> None:
    """'isolation: every job runs in a bubblewrap sandbox, as ...' (loud when it does not)."""
    style = ISOLATION_STYLE.get(isolation["mode"], "")
    text = escape(f"isolation ({isolation['mode']}): {isolation['message']}")
    out.print(f"\n[{style}]{text}[/{style}]" if style else f"\n{text}", soft_wrap=True)


# -- gpupool node ... -----------------------------------------------------------------------------


def show(name: NodeName, output: OutputOption = Output.TABLE) -> None:
    """Show one node: its state, drain, join time, fabric group, GPUs and latest changes."""
    with connect() as client:
        found = client.node(name)
    if output == Output.JSON:
        print_json(found)
        return
    print_node(found)
    if found.get("events"):
        out.print("")
        table = new_table("WHEN", "CHANGE", "BY", "WHAT")
        for event in found["events"]:
            by = escape(event["actor"]) if event["actor"] else "cluster"
            table.add_row(timestamp(event["at"]), event["reason"], by, escape(event["message"]))
        out.print(table)


def drain(
    name: NodeName,
    reason: Annotated[
        str | None, typer.Option("--reason", "-r", help="Why, shown on the node to everyone.")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Keep new work off a node (admins): nothing new is placed there; what runs there goes on
    to its end.

    Draining a drained node sets its reason. 'gpupool node undrain NAME' ends it.
    """
    with connect() as client:
        found = client.drain_node(name, reason)
    if output == Output.JSON:
        print_json(found)
        return
    why = f" ({found['drain_reason']})" if found.get("drain_reason") else ""
    said = f"node {found['name']} drained{why}: no new work is placed there; what runs there "
    out.print(escape(said + "goes on to its end"), soft_wrap=True)


def undrain(name: NodeName, output: OutputOption = Output.TABLE) -> None:
    """Let new work on a drained node again, or a removed one back (admins)."""
    with connect() as client:
        found = client.undrain_node(name)
    if output == Output.JSON:
        print_json(found)
        return
    if found["schedulable"]:
        out.print(escape(f"node {found['name']} undrained: new work may be placed there again"))
    else:
        out.print(
            escape(
                f"node {found['name']} undrained; it is {found['state']}, so not schedulable yet"
            )
        )


def remove(name: NodeName, output: OutputOption = Output.TABLE) -> None:
    """Take a node out of the pool (admins); refused while jobs hold resources on it.

    Drain it first and let its jobs end (or cancel them). A removed node that joins again
    comes back as a new node. The server's own node cannot be removed.
    """
    with connect() as client:
        found = client.remove_node(name)
    if output == Output.JSON:
        print_json(found)
        return
    out.print(escape(f"node {found['name']} removed from the pool"))
