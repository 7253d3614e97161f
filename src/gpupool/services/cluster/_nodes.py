"""Nodes: registration of discovered inventories, capacity for the scheduler, who holds what,
and each node's life in the pool: drain, undrain, down, up, removal.

Whether the scheduler may place new work on a node is one stored flag, ``schedulable``, that
``settle`` alone derives (up, not drained, not removed): the snapshot reads that flag, and
every change here records the pool's size and an event the admin can read back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sqlalchemy import select, union
from sqlalchemy.orm import Session

from gpupool.domain.inventory import NodeInventory
from gpupool.domain.jobs import JobStatus
from gpupool.domain.nodes import NodeChange, NodeState
from gpupool.domain.topology import gpu_domains
from gpupool.domain.views import (
    CpuHolderView,
    HolderView,
    NodeDetailView,
    NodeRemovedView,
    NodeView,
)
from gpupool.errors import NodeBusy, NotFound, OwnNodeKept
from gpupool.scheduler.types import GpuCapacity, NodeCapacity
from gpupool.services.cluster._ports import NodeRemovals
from gpupool.services.cluster._views import HostHeld, node_event_view, node_view
from gpupool.services.core import Principal, Reads, Tells
from gpupool.store.models import (
    AttemptModel,
    JobModel,
    NodeEventModel,
    NodeModel,
    PoolChangeModel,
)

log = logging.getLogger(__name__)

ACTIVE = (JobStatus.STARTING.value, JobStatus.RUNNING.value)
# attempts that may hold a node's GPUs: an orphaned one's processes outlived its runner
HOLDING_ATTEMPTS = ("starting", "running", "orphaned")
SHOWN_EVENTS = 20  # the latest changes a node's own view lists
SHOWN_JOBS = 20  # the jobs a refused removal names


# -- what the API calls ------------------------------------------------------------------------


def list_nodes(ctx: Reads, who: Principal) -> list[NodeView]:
    """Every node of the pool (removed ones are not) and who holds each GPU, as ``who`` may
    see them (see ``holders``)."""
    with ctx.db.reader() as session:
        held, hosts = holders(session, who), hosts_held(session, who)
        return [
            node_view(node, held, hosts.get(node.name, NOTHING_HELD)) for node in node_rows(session)
        ]


def show_node(ctx: Reads, who: Principal, name: str) -> NodeDetailView:
    """One node (NotFound if there is none of that name) as ``list_nodes`` shows it, with its
    latest changes."""
    with ctx.db.reader() as session:
        node = get_node(session, name)
        shown = node_view(node, holders(session, who), host_held(session, name, who))
        events = [node_event_view(event) for event in node_events(session, name)]
    return NodeDetailView(**dict(shown), events=events)


def drain(ctx: Tells, who: Principal, name: str, reason: str | None = None) -> NodeView:
    """Keep new work off a node: the scheduler places nothing there (nor frees GPUs there by
    preemption); what runs there goes on to its end. Draining a drained node sets its reason."""
    return _admin_change(ctx, who, name, lambda s, n, now: set_drain(s, n, now, reason, who.name))


def undrain(ctx: Tells, who: Principal, name: str) -> NodeView:
    """Let new work on a drained node again (a node not drained is left as it is). A removed
    node is let back into the pool: listed as down, it joins again as soon as the cluster
    sees it (its joiner still runs, or runs again)."""
    with ctx.db.session() as session:
        node = _live_node(session, name) or _removed_node(session, name)
        node = node or get_node(session, name)  # none: NotFound, saying how to list them
        now = ctx.clock.now()
        if node.removed_at is not None:
            let_back(session, node, now, who.name)
        else:
            clear_drain(session, node, now, who.name)
        shown = node_view(node, holders(session, who), host_held(session, name, who))
    ctx.loop.wake()
    return shown


def remove(ctx: NodeRemovals, who: Principal, name: str) -> NodeRemovedView:
    """Take a node out of the pool: it is no longer listed nor schedulable, and the cluster
    side is told (``ctx.on_node_removed``) after the commit, to stop it. It stays out, its
    joiner running or not, until an admin lets it back (``undrain``).

    Refused (NodeBusy, naming the jobs) while jobs hold resources there and the node is up:
    drain it and let them end first. A down node may be removed with jobs on it: the pool
    lost them already, and the cluster's loss handling ends them. There is no forcing: a node
    the pool still reaches may still run that work, and its GPUs would be handed out twice.
    The server's own node cannot be removed (OwnNodeKept): it re-registers while it runs."""
    if name == ctx.own_node:
        raise OwnNodeKept(
            f"'{name}' is this server's own node: it is part of the pool while the server "
            f"runs. Drain it to keep new work off it: gpupool node drain {name}"
        )
    now = ctx.clock.now()
    with ctx.db.session() as session:
        take_out(session, get_node(session, name), now, who.name)
    ctx.loop.wake()
    _tell_removed(ctx.on_node_removed, name)
    return NodeRemovedView(name=name, removed_at=now)


# -- the steps, in a caller's transaction ------------------------------------------------------


def register(
    session: Session,
    inventory: NodeInventory,
    now: float,
    address: str | None = None,
    fabric_group: str | None = None,
) -> NodeModel:
    """Insert or refresh a node's inventory. A new node, a removed one and a down one (re)join
    (``joined_at``, an event) and are schedulable at once unless drained; a removed one comes
    back as new, its drain forgotten. ``address`` and ``fabric_group`` are kept when None.

    Nodes join and change here, so this is where the pool's size is recorded."""
    node = session.scalar(select(NodeModel).where(NodeModel.name == inventory.name))
    before = _pool_part(node) if node is not None else 0
    if node is None:
        node = NodeModel(name=inventory.name, drain=False, state=NodeState.UP.value)
        session.add(node)
        _join(session, node, now, NodeChange.JOINED, "joined the pool")
    elif node.removed_at is not None:
        node.removed_at, node.drain, node.drain_reason = None, False, None
        _join(session, node, now, NodeChange.JOINED, "joined the pool again after its removal")
    elif node.state == NodeState.DOWN.value:
        _join(session, node, now, NodeChange.REJOINED, "joined the pool again after it was down")
    node.inventory = inventory.model_dump(mode="json")
    node.discovered_at = node.last_seen_at = now
    node.joined_at = node.joined_at if node.joined_at is not None else now
    node.address = address if address is not None else node.address
    node.fabric_group = fabric_group if fabric_group is not None else node.fabric_group
    settle(node)
    session.flush()
    record_pool(session, now, changed=_pool_part(node) != before)
    return node


def mark_down(session: Session, name: str, now: float, why: str) -> NodeModel | None:
    """The cluster lost ``name``: nothing new is placed there until it is up again. Its
    running jobs are the caller's to end (the pool lost them). None for a node the pool does
    not have (unknown, or removed); a node down already is left as it is. The caller wakes
    the control loop after its commit."""
    node = _live_node(session, name)
    if node is None or node.state == NodeState.DOWN.value:
        return node

    def go_down() -> None:
        node.state, node.down_at = NodeState.DOWN.value, now
        record(session, name, now, NodeChange.DOWN, f"down: {why}")

    _changing(session, node, now, go_down)
    return node


def mark_up(session: Session, name: str, now: float, why: str) -> NodeModel | None:
    """The cluster reaches ``name`` again: it is up, (re)joined now, schedulable unless
    drained. None for a node the pool does not have; one up already is left as it is. The
    caller wakes the control loop after its commit."""
    node = _live_node(session, name)
    if node is None or node.state == NodeState.UP.value:
        return node
    _changing(session, node, now, lambda: _join(session, node, now, NodeChange.UP, f"up: {why}"))
    return node


def set_drain(
    session: Session, node: NodeModel, now: float, reason: str | None, actor: str | None
) -> None:
    """Drain ``node`` with ``reason`` (a drained node gets the new reason; a blank reason is
    none)."""
    reason = reason.strip() or None if reason is not None else None
    if node.drain and node.drain_reason == reason:
        return
    again = node.drain

    def drain_it() -> None:
        node.drain, node.drain_reason = True, reason
        said = "drain reason changed" if again else "drained: no new work is placed here"
        record(session, node.name, now, NodeChange.DRAINED, _by(said, actor, reason), actor)

    _changing(session, node, now, drain_it)


def clear_drain(session: Session, node: NodeModel, now: float, actor: str | None) -> None:
    """Undrain ``node`` (a node not drained is left as it is)."""
    if not node.drain:
        return

    def undrain_it() -> None:
        node.drain, node.drain_reason = False, None
        said = "undrained: new work may be placed here again"
        record(session, node.name, now, NodeChange.UNDRAINED, _by(said, actor), actor)

    _changing(session, node, now, undrain_it)


def let_back(session: Session, node: NodeModel, now: float, actor: str | None) -> None:
    """A removed ``node`` may join again: down (and not drained) until the cluster sees it."""

    def let_in() -> None:
        node.removed_at, node.drain, node.drain_reason = None, False, None
        node.state, node.down_at = NodeState.DOWN.value, now
        said = "let back into the pool after its removal: it joins when its node is seen"
        record(session, node.name, now, NodeChange.UNDRAINED, _by(said, actor), actor)

    _changing(session, node, now, let_in)


def removed_names(session: Session) -> set[str]:
    """The nodes an admin removed and has not let back: the cluster keeps them out."""
    return set(session.scalars(select(NodeModel.name).where(NodeModel.removed_at.is_not(None))))


def take_out(session: Session, node: NodeModel, now: float, actor: str | None) -> None:
    """Remove ``node`` from the pool; NodeBusy while it is up and jobs hold resources there."""
    held = holding_jobs(session, node.name)
    if held and node.state == NodeState.UP.value:
        named = ", ".join(str(job_id) for job_id in held[:SHOWN_JOBS])
        more = f" and {len(held) - SHOWN_JOBS} more" if len(held) > SHOWN_JOBS else ""
        raise NodeBusy(
            f"jobs {named}{more} hold resources on node '{node.name}': drain it (gpupool node "
            f"drain {node.name}), let them end or cancel them, then remove it",
            jobs=held,
        )
    lost = f"; the pool lost jobs {', '.join(map(str, held))} with it" if held else ""

    def remove_it() -> None:
        node.removed_at = now
        record(session, node.name, now, NodeChange.REMOVED, _by("removed", actor) + lost, actor)

    _changing(session, node, now, remove_it)


def settle(node: NodeModel) -> None:
    """The one place ``schedulable`` is derived: new work may be placed on a node that is up,
    not drained and not removed."""
    node.schedulable = (
        node.state == NodeState.UP.value and not node.drain and node.removed_at is None
    )


def record(
    session: Session,
    name: str,
    now: float,
    change: NodeChange,
    message: str,
    actor: str | None = None,
) -> None:
    """An event of node ``name`` the admin reads back (``gpupool node show``), and a log line."""
    session.add(
        NodeEventModel(node=name, at=now, reason=change.value, message=message, actor=actor)
    )
    log.info("node %s: %s", name, message)


def holding_jobs(session: Session, name: str) -> list[int]:
    """The ids of the jobs holding resources on node ``name``, in order."""
    on_node = select(JobModel.id).where(JobModel.node == name, JobModel.status.in_(ACTIVE))
    attempts = select(AttemptModel.job_id).where(
        AttemptModel.node == name, AttemptModel.status.in_(HOLDING_ATTEMPTS)
    )
    return sorted(set(session.scalars(union(on_node, attempts))))


def node_events(session: Session, name: str, limit: int = SHOWN_EVENTS) -> list[NodeEventModel]:
    """The latest ``limit`` events of node ``name``, oldest first."""
    latest = session.scalars(
        select(NodeEventModel)
        .where(NodeEventModel.node == name)
        .order_by(NodeEventModel.id.desc())
        .limit(limit)
    )
    return list(latest)[::-1]


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
    """The nodes of the pool (removed ones are not), by name."""
    return list(session.scalars(LIVE_NODES.order_by(NodeModel.name)))


def get_node(session: Session, name: str) -> NodeModel:
    """The node of the pool named ``name``; NotFound if there is none (or it was removed)."""
    node = _live_node(session, name)
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
        drained=node.drain,
        fabric_group=node.fabric_group,
        holds=frozenset(node.holds or ()),
    )


def record_holdings(session: Session, found: Mapping[str, Mapping[str, int]], now: float) -> None:
    """What these nodes said they hold (node -> key -> bytes, ``executors.holdings``), kept
    on their rows for placement (``capacity``); a node not of the pool is passed over."""
    if not found:
        return
    for node in session.scalars(select(NodeModel).where(NodeModel.name.in_(list(found)))):
        node.holds, node.holds_at = dict(found[node.name]), now


def holders(session: Session, who: Principal) -> dict[str, list[HolderView]]:
    """GPU UUID -> the jobs holding (part of) it now, as ``who`` may see them.

    A job of a team ``who`` is not in (admins are in every team) shows only what it holds:
    ``other_team`` is True and its id, name, user and team are None, so a cluster view tells
    how busy a GPU is without telling another team what it runs."""
    held: dict[str, list[HolderView]] = {}
    jobs = session.scalars(select(JobModel).where(JobModel.status.in_(ACTIVE)))
    for job in jobs:
        visible = who.can_see_team(job.team_id)
        tasks = (job.placement or {}).get("tasks") or [job.placement or {}]
        for gpu in (g for task in tasks for g in task.get("gpus", [])):
            held.setdefault(gpu["uuid"], []).append(_holder(job, gpu, visible))
    return held


def hosts_held(session: Session, who: Principal | None = None) -> dict[str, HostHeld]:
    """Node name -> the CPUs and host memory its starting and running jobs hold (each task
    of a job over several nodes counts on its own node), and, for ``who``, which jobs hold
    them (as ``holders`` shows a GPU's: another team's job by what it holds only)."""
    held: dict[str, dict[int, CpuHolderView]] = {}
    for job in session.scalars(select(JobModel).where(JobModel.status.in_(ACTIVE))):
        for task in (job.placement or {}).get("tasks") or [job.placement or {}]:
            if "node" in task:
                jobs = held.setdefault(task["node"], {})
                jobs[job.id] = _cpu_holder(job, task, jobs.get(job.id), who)
    return {name: _host(jobs.values(), who is not None) for name, jobs in held.items()}


def host_held(session: Session, name: str, who: Principal | None = None) -> HostHeld:
    """What the starting and running jobs hold of node ``name``'s CPUs and memory."""
    return hosts_held(session, who).get(name, NOTHING_HELD)


def _cpu_holder(
    job: JobModel, task: dict[str, Any], before: CpuHolderView | None, who: Principal | None
) -> CpuHolderView:
    """``job`` as a holder of its ``task``'s CPUs (added to its other tasks' on that node)."""
    cpus = task.get("cpus", 0.0) + (before.cpus if before else 0.0)
    memory = task.get("memory_bytes", 0) + (before.memory_bytes if before else 0)
    visible = who is not None and who.can_see_team(job.team_id)
    return CpuHolderView(**_holding(job, visible), cpus=cpus, memory_bytes=memory)


def _host(jobs: Iterable[CpuHolderView], named: bool) -> HostHeld:
    found = sorted(jobs, key=lambda h: (-h.cpus, h.job_id or 0))
    cpus, memory = sum(h.cpus for h in found), sum(h.memory_bytes for h in found)
    return HostHeld(cpus, memory, tuple(found) if named else ())


def _holder(job: JobModel, gpu: dict[str, Any], visible: bool) -> HolderView:
    return HolderView(
        **_holding(job, visible), share=gpu["share"], memory_bytes=gpu["memory_bytes"]
    )


def _holding(job: JobModel, visible: bool) -> dict[str, Any]:
    """Who holds a GPU or CPUs, as the caller may see it: a job of a team it cannot see is
    "another team's job", known by what it holds only."""
    if not visible:
        return {"job_id": None, "job_name": None, "user": None, "team": None, "other_team": True}
    return {"job_id": job.id, "job_name": job.name, "user": job.user.name, "team": job.team.name}


def _pool_part(node: NodeModel) -> int:
    if not node.schedulable:
        return 0
    return len(NodeInventory.model_validate(node.inventory).schedulable_gpus())


def _live_node(session: Session, name: str) -> NodeModel | None:
    return session.scalar(LIVE_NODES.where(NodeModel.name == name))


def _removed_node(session: Session, name: str) -> NodeModel | None:
    return session.scalar(
        select(NodeModel).where(NodeModel.name == name, NodeModel.removed_at.is_not(None))
    )


def _admin_change(
    ctx: Tells,
    who: Principal,
    name: str,
    change: Callable[[Session, NodeModel, float], None],
) -> NodeView:
    """Apply an admin's ``change`` to node ``name`` in a transaction; then wake the control
    loop, so that its next cycle sees the node as it is now."""
    with ctx.db.session() as session:
        node = get_node(session, name)
        change(session, node, ctx.clock.now())
        shown = node_view(node, holders(session, who), host_held(session, name, who))
    ctx.loop.wake()
    return shown


def _changing(session: Session, node: NodeModel, now: float, change: Callable[[], None]) -> None:
    """Apply ``change`` to ``node``, derive its flag again, record the pool's size if it moved."""
    before = _pool_part(node)
    change()
    settle(node)
    session.flush()
    record_pool(session, now, changed=_pool_part(node) != before)


def _join(session: Session, node: NodeModel, now: float, change: NodeChange, message: str) -> None:
    node.state, node.down_at, node.joined_at = NodeState.UP.value, None, now
    record(session, node.name, now, change, message)


def _by(said: str, actor: str | None, reason: str | None = None) -> str:
    """'drained by alice: disk swap'."""
    return said + (f" (by {actor})" if actor else "") + (f": {reason}" if reason else "")


def _tell_removed(hook: Callable[[str], None], name: str) -> None:
    """Tell the cluster side; the removal is committed, so a failure there is logged only."""
    try:
        hook(name)
    except Exception:
        log.exception("the cluster side failed to stop removed node %s", name)


def nothing_to_stop(name: str) -> None:
    """The platform's ``on_node_removed`` until a cluster side sets its own: one machine has
    no other node to stop."""


LIVE_NODES = select(NodeModel).where(NodeModel.removed_at.is_(None))
NOTHING_HELD = HostHeld()


def node_addresses(session: Session, names: list[str]) -> dict[str, str | None]:
    """How the other nodes of a gang reach each of its nodes (as the cluster reported)."""
    rows = session.execute(
        select(NodeModel.name, NodeModel.address).where(NodeModel.name.in_(names))
    )
    return dict(rows.all())
