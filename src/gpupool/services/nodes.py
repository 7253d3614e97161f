"""Nodes: registration of discovered inventories, capacity for the scheduler, who holds what."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobStatus
from gpupool.domain.topology import gpu_domains
from gpupool.domain.views import HolderView, NodeView
from gpupool.errors import NotFound
from gpupool.scheduler.types import GpuCapacity, NodeCapacity
from gpupool.services.access import Principal
from gpupool.services.context import Context
from gpupool.services.views import node_view
from gpupool.store.models import JobModel, NodeModel, PoolChangeModel

ACTIVE = (JobStatus.STARTING.value, JobStatus.RUNNING.value)


# -- what the API calls ------------------------------------------------------------------------


def list_nodes(ctx: Context, who: Principal) -> list[NodeView]:
    """Every node and who holds each GPU, as ``who`` may see them (see ``holders``)."""
    with ctx.db.reader() as session:
        held = holders(session, who)
        return [node_view(node, held) for node in node_rows(session)]


def show_node(ctx: Context, who: Principal, name: str) -> NodeView:
    """One node (NotFound if there is none of that name), as ``list_nodes`` shows it."""
    with ctx.db.reader() as session:
        return node_view(get_node(session, name), holders(session, who))


# -- the steps, in a caller's transaction ------------------------------------------------------


def register(session: Session, inventory: NodeInventory, now: float) -> NodeModel:
    """Insert or refresh a node's inventory; it is schedulable at once.

    Nodes join and change here only, so this is where the pool's size is recorded."""
    node = session.scalar(select(NodeModel).where(NodeModel.name == inventory.name))
    data = inventory.model_dump(mode="json")
    before = _pool_part(node) if node is not None else 0
    if node is None:
        node = NodeModel(name=inventory.name, inventory=data, discovered_at=now, last_seen_at=now)
        node.schedulable = True
        session.add(node)
    else:
        node.inventory, node.discovered_at, node.last_seen_at = data, now, now
    session.flush()
    record_pool(session, now, changed=_pool_part(node) != before)
    return node


def pool_gpus(session: Session) -> int:
    """The GPUs the scheduler may place on: those of schedulable nodes."""
    return sum(_pool_part(node) for node in node_rows(session))


def record_pool(session: Session, now: float, changed: bool = True) -> None:
    """Record the pool's size from ``now`` on if it differs from the last one recorded (or
    none is). ``changed``: False when the caller knows the size did not change (no need to
    count every node's GPUs again)."""
    last = session.scalar(
        select(PoolChangeModel.gpus)
        .order_by(PoolChangeModel.at.desc(), PoolChangeModel.id.desc())
        .limit(1)
    )
    if last is not None and not changed:
        return
    gpus = pool_gpus(session)
    if gpus != last:
        session.add(PoolChangeModel(at=now, gpus=gpus))
        session.flush()


def node_rows(session: Session) -> list[NodeModel]:
    return list(session.scalars(select(NodeModel).order_by(NodeModel.name)))


def get_node(session: Session, name: str) -> NodeModel:
    node = session.scalar(select(NodeModel).where(NodeModel.name == name))
    if node is None:
        raise NotFound(f"no node named '{name}': list nodes with 'gpupool nodes'")
    return node


def capacities(session: Session) -> list[NodeCapacity]:
    return [capacity(node) for node in node_rows(session)]


def capacity(node: NodeModel) -> NodeCapacity:
    """What the scheduler may place on a node; each GPU's ``domain`` comes from the links
    and NUMA nodes of its inventory (:mod:`gpupool.domain.topology` has the rule)."""
    inventory = NodeInventory.model_validate(node.inventory)
    domains = gpu_domains(inventory.gpus, inventory.links)
    gpus = tuple(
        GpuCapacity(
            uuid=g.uuid,
            index=g.index,
            model=g.model,
            memory_bytes=g.memory_bytes,
            domain=domains.get(g.index, g.index),
        )
        for g in inventory.schedulable_gpus()
    )
    return NodeCapacity(
        name=node.name,
        gpus=gpus,
        cpus=float(inventory.cpus),
        memory_bytes=inventory.memory_bytes,
        schedulable=node.schedulable,
    )


def holders(session: Session, who: Principal) -> dict[str, list[HolderView]]:
    """GPU UUID -> the jobs holding (part of) it now, as ``who`` may see them.

    A job of a team ``who`` is not in (admins are in every team) shows only what it holds:
    ``other_team`` is True and its id, name, user and team are None, so a cluster view tells
    how busy a GPU is without telling another team what it runs."""
    held: dict[str, list[HolderView]] = {}
    jobs = session.scalars(select(JobModel).where(JobModel.status.in_(ACTIVE)))
    for job in jobs:
        visible = who.can_see_team(job.team_id)
        for gpu in (job.placement or {}).get("gpus", []):
            held.setdefault(gpu["uuid"], []).append(_holder(job, gpu, visible))
    return held


def _holder(job: JobModel, gpu: dict[str, Any], visible: bool) -> HolderView:
    share, memory = gpu["share"], gpu["memory_bytes"]
    if not visible:
        return HolderView(
            job_id=None,
            job_name=None,
            user=None,
            team=None,
            share=share,
            memory_bytes=memory,
            other_team=True,
        )
    return HolderView(
        job_id=job.id,
        job_name=job.name,
        user=job.user.name,
        team=job.team.name,
        share=share,
        memory_bytes=memory,
    )


def _pool_part(node: NodeModel) -> int:
    if not node.schedulable:
        return 0
    return len(NodeInventory.model_validate(node.inventory).schedulable_gpus())
