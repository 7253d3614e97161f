"""Phase 3: where one task goes, if anywhere (best fit), and taking it from capacity.

* Whole GPUs: the node with the fewest free whole GPUs that still has enough (ties: name).
  On that node, GPUs of one connectivity domain (NVLink or one PCIe switch) when a domain
  has enough free, the fullest such domain first (one GPU too); else the largest domains first.
* A fraction (or GPU memory alone): first the partly used GPU with the least free share that
  still fits, then the least free memory; else a free GPU on the node with the fewest free
  GPUs, in its fullest domain, so whole GPUs and domains stay free for whole-GPU jobs.
* No GPUs: the node with the fewest free GPUs whose CPUs and memory fit.

Given a packer (the product's default, ``Policy.packing``: the cycle makes one and passes it
in), a GPU task goes to the one of best fit's first spots where fragmentation grows least
(``packing``).

``where`` narrows the GPUs (models) and nodes (reservations) a task may use. A gang (a job
of several tasks) places its tasks one by one and gives everything back if one does not fit.

Given a job's ``Fetch`` (``locality``: what it fetches onto its nodes, and what each node
holds), a task goes to the spot with the fewest bytes left to fetch among the one above and
a spot on each node that holds any of its wants (however far down best fit's order: the
holders are looked up, not searched for; when they are many, best fit's order is walked
until enough of them are met); among the cheapest, best fit's first ``CANDIDATES`` are
scored by the packer, as above. Equal to the spot above, it keeps that one.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator, Set
from itertools import islice

from gpupool.scheduler.capacity import Claim, FreeCapacity, GpuState, NodeState
from gpupool.scheduler.fit import (
    Demand,
    Where,
    fraction_demand,
    fraction_fits,
    host_fits,
    least_fraction_share,
    whole_gpus_on,
)
from gpupool.scheduler.locality import Fetch
from gpupool.scheduler.packing import CANDIDATES, SCORE_EPSILON, Packer
from gpupool.scheduler.types import GpuShare, Placement


def find_spot(
    demand: Demand,
    capacity: FreeCapacity,
    where: Where | None = None,
    packer: Packer | None = None,
    fetch: Fetch | None = None,
) -> Claim | None:
    """The best spot for ``demand`` in the free capacity, or None when it fits nowhere:
    fragmentation-aware (``packing``) with a packer, else best fit; with a ``fetch`` that
    prefers locality, the spot with the fewest bytes left to fetch, that one among equals;
    ``where``: None, anywhere."""
    where = where if where is not None else Where()
    if packer is not None and demand.uses_gpus:
        claim = packed_spot(packer, demand, capacity, where)
    else:
        claim = next(spots(demand, capacity, where, 1), None)
    if claim is None or fetch is None or not fetch.prefer:
        return claim
    return nearer_spot(claim, demand, capacity, where, packer, fetch)


def nearer_spot(
    chosen: Claim,
    demand: Demand,
    capacity: FreeCapacity,
    where: Where,
    packer: Packer | None,
    fetch: Fetch,
) -> Claim:
    """``chosen`` (the spot placement picks without locality), unless a node holding some
    of the job's wants has a spot with fewer bytes left to fetch: then, among the first
    ``CANDIDATES`` spots in best fit's order with the fewest bytes left, the one where
    fragmentation grows least (with a packer), else the first. Only spots that fit now are
    looked at: a job never waits for a holding node."""
    least = fetch.cost(chosen.node.name)
    if not least:
        return chosen
    holders = fetch.candidates()
    if len(holders) <= SCANNED:
        claims = _holders_spots(holders, demand, capacity, where, fetch, least)
    else:
        claims = _walked_spots(demand, capacity, where, fetch, least)
    if not claims:
        return chosen
    if packer is None or not demand.uses_gpus:
        return claims[0]
    best: tuple[float, Claim] | None = None
    for claim in claims:
        score = growth_of(packer, claim, demand)
        if best is None or score < best[0] - SCORE_EPSILON:
            best = (score, claim)
    return best[1] if best is not None else chosen


SCANNED = 4 * CANDIDATES  # holders looked at one by one; more: best fit's order is walked


def _holders_spots(
    holders: Set[str],
    demand: Demand,
    capacity: FreeCapacity,
    where: Where,
    fetch: Fetch,
    least: int,
) -> list[Claim]:
    """A few holders: each one's spot, if it fits, and of those with the fewest bytes left
    to fetch (below ``least``), the first ``CANDIDATES`` in best fit's order."""
    by_name = capacity.by_name
    found: list[tuple[int, tuple, NodeState, Claim | None]] = []
    for name in holders:
        node = by_name.get(name)
        if node is None:
            continue
        cost = fetch.cost(name)
        if cost >= least:
            continue
        spot = node_spot(node, demand, where)
        if spot is not None:
            found.append((cost, spot[0], node, spot[1]))
    if not found:
        return []
    cheapest = min(entry[0] for entry in found)
    nearest = heapq.nsmallest(
        CANDIDATES, (entry for entry in found if entry[0] == cheapest), key=lambda entry: entry[1]
    )
    return [
        claim if claim is not None else whole_claim(node, demand, where)
        for _, _, node, claim in nearest
    ]


def _walked_spots(
    demand: Demand, capacity: FreeCapacity, where: Where, fetch: Fetch, least: int
) -> list[Claim]:
    """Many holders: best fit's order walked, the first ``CANDIDATES`` spots with the fewest
    bytes left to fetch (below ``least``) kept; it stops at that many that fetch nothing."""
    kept: list = []
    cheapest = least
    walked: Iterator = (
        whole_nodes(demand, capacity, where)
        if demand.whole
        else spots(demand, capacity, where, len(capacity.nodes) * max(capacity.max_gpus, 1))
    )
    for item in walked:
        cost = fetch.cost(item.name if demand.whole else item.node.name)
        if cost < cheapest:
            cheapest, kept = cost, [item]
        elif cost == cheapest < least and len(kept) < CANDIDATES:
            kept.append(item)
        if not cheapest and len(kept) >= CANDIDATES:
            break
    if demand.whole:
        return [whole_claim(node, demand, where) for node in kept]
    return kept


def growth_of(packer: Packer, claim: Claim, demand: Demand) -> float:
    """How much the claim's node's fragmentation grows with the claim (``packed_spot``'s
    score)."""
    node = claim.node
    if demand.whole and uniform(node, demand):
        return packer.whole_growth(node, demand)
    state, after = packer.before_after(claim)
    return packer.growth(state, after, node.cpus, demand.cpus)


def node_spot(node: NodeState, demand: Demand, where: Where) -> tuple[tuple, Claim | None] | None:
    """Whether ``demand`` fits this one node now (None: not), and where: its place in best
    fit's order over the pool, and the spot best fit would pick on it (None for whole GPUs:
    ``whole_claim`` makes it, for the few spots kept)."""
    if not host_fits(node, demand):
        return None
    if demand.whole:
        if node.free_count < demand.whole or not _node_ok(node, demand, where):
            return None
        if not uniform(node, demand) and len(whole_gpus_on(node, demand, where)) < demand.whole:
            return None
        return (0, node.free_count, node.rank), None
    if demand.fractional:
        if not _node_ok(node, demand, where):
            return None
        shared = [
            gpu
            for gpu in node.gpus
            if gpu.is_shared
            and where.gpu_ok(gpu)
            and fraction_fits(gpu, *fraction_demand(demand, gpu))
        ]
        if shared:
            gpu = min(shared, key=GpuState.key)
            share, memory = fraction_demand(demand, gpu)
            return (0, *gpu.key()), Claim(node, ((gpu, share, memory),))
        fitting = [
            gpu
            for gpu in node.gpus
            if gpu.free and where.gpu_ok(gpu) and fraction_fits(gpu, *fraction_demand(demand, gpu))
        ]
        if not fitting:
            return None
        [gpu] = connected(fitting, 1)
        share, memory = fraction_demand(demand, gpu)
        return (1, node.free_count, node.rank), Claim(node, ((gpu, share, memory),))
    if where.node_ok is not None and not where.node_ok(node, demand):
        return None
    return (0, node.free_count, node.rank), Claim(node, ())


def packed_spot(
    packer: Packer, demand: Demand, capacity: FreeCapacity, where: Where
) -> Claim | None:
    """The spot among best fit's first candidates where fragmentation grows least (``packing``)."""
    if not demand.whole:
        return packer.choose(spots(demand, capacity, where, CANDIDATES), demand)
    # whole GPUs: a node of one model scores by its state alone; its GPUs are chosen (of one
    # connectivity domain) for the winner only
    best: tuple[float, NodeState] | None = None
    for node in islice(whole_nodes(demand, capacity, where), CANDIDATES):
        if uniform(node, demand):
            score = packer.whole_growth(node, demand)
        else:
            state, after = packer.before_after(whole_claim(node, demand, where))
            score = packer.growth(state, after, node.cpus, demand.cpus)
        if best is None or score < best[0] - SCORE_EPSILON:
            best = (score, node)
    return None if best is None else whole_claim(best[1], demand, where)


def spots(demand: Demand, capacity: FreeCapacity, where: Where, limit: int) -> Iterator[Claim]:
    """Spots for ``demand`` in best fit's order, the first ``limit`` of each kind: nodes for
    whole GPUs; partly used GPUs, then free GPUs, for a fraction; nodes for no GPU."""
    if demand.whole:
        for node in islice(whole_nodes(demand, capacity, where), limit):
            yield whole_claim(node, demand, where)
    elif demand.fractional:
        yield from islice(_shared_spots(demand, capacity, where), limit)
        yield from islice(_fresh_spots(demand, capacity, where), limit)
    else:
        yield from islice(_host_spots(demand, capacity, where), limit)


def take_spot(claim: Claim, demand: Demand, capacity: FreeCapacity) -> tuple[GpuShare, ...]:
    """Subtract the claim from capacity; the GPU shares it holds, for the placement."""
    capacity.take(claim, demand.cpus, demand.memory)
    return tuple([GpuShare(gpu.uuid, share, memory) for gpu, share, memory in claim.parts])


def place_tasks(
    job_id: int,
    tasks: int,
    demand: Demand,
    capacity: FreeCapacity,
    where: Where | None = None,
    distinct: bool = False,
    packer: Packer | None = None,
    fetch: Fetch | None = None,
) -> list[Placement] | None:
    """All ``tasks`` of a job placed (and taken from capacity), or none of them (None);
    ``distinct``: each on a node of its own (a job over several nodes); ``packer`` and
    ``fetch``: as ``find_spot``'s (a node one task went to holds the job's wants for the
    next tasks: it fetches them once)."""
    where = where if where is not None else Where()
    claims: list[Claim] = []
    placements: list[Placement] = []
    if fetch is not None:
        fetch.placed.clear()
    for task in range(tasks):
        here = away_from([p.node for p in placements], where) if distinct and placements else where
        claim = find_spot(demand, capacity, here, packer, fetch)
        if claim is None:
            for taken in reversed(claims):
                capacity.give_back(taken, demand.cpus, demand.memory)
            return None
        gpus = take_spot(claim, demand, capacity)
        claims.append(claim)
        name = claim.node.name
        held = ()
        if fetch is not None:
            held = fetch.held(name)
            fetch.placed.add(name)
        placements.append(Placement(job_id, name, gpus, demand.cpus, demand.memory, task, held))
    return placements


def place_in_one_fabric(
    job_id: int,
    tasks: int,
    demand: Demand,
    capacity: FreeCapacity,
    where: Where,
    fabric_of: dict[str, str | None],
    packer: Packer | None = None,
    fetch: Fetch | None = None,
) -> list[Placement] | None:
    """All ``tasks``, each on a node of its own, on nodes of one fabric group (the groups
    tried in name order; nodes of no known group form one group of their own)."""
    for group in sorted({g or "" for g in fabric_of.values()}):
        inside = within({n for n, g in fabric_of.items() if (g or "") == group}, where)
        placements = place_tasks(
            job_id, tasks, demand, capacity, inside, distinct=True, packer=packer, fetch=fetch
        )
        if placements is not None:
            return placements
    return None


def within(nodes: set[str], where: Where) -> Where:
    """``where``, on the nodes named only."""
    inner = where.node_ok

    def node_ok(node: NodeState, demand: Demand) -> bool:
        return node.name in nodes and (inner is None or inner(node, demand))

    return Where(where.types, node_ok)


def away_from(nodes: list[str], where: Where) -> Where:
    """``where``, without the nodes named."""
    taken, inner = frozenset(nodes), where.node_ok

    def node_ok(node: NodeState, demand: Demand) -> bool:
        return node.name not in taken and (inner is None or inner(node, demand))

    return Where(where.types, node_ok)


def unplace(placements: list[Placement], demand: Demand, capacity: FreeCapacity) -> None:
    """Give back to capacity what ``place_tasks`` took for these placements."""
    for placement in reversed(placements):
        node = capacity.by_name[placement.node]
        parts = tuple(
            (node.by_uuid[part.uuid], part.share, part.memory_bytes) for part in placement.gpus
        )
        capacity.give_back(Claim(node, parts), demand.cpus, demand.memory)


def whole_nodes(demand: Demand, capacity: FreeCapacity, where: Where) -> Iterator[NodeState]:
    """The nodes with room for a whole-GPU demand, in best fit's order: the fewest free
    whole GPUs first, then by name."""
    wanted = demand.whole
    if wanted > capacity.largest_free_block():
        return
    for node in capacity.nodes_by_free_count(wanted):
        if not host_fits(node, demand):
            continue
        if where.restricted and not where.node_allowed(node, demand):
            continue
        if uniform(node, demand) or len(whole_gpus_on(node, demand, where)) >= wanted:
            yield node


def uniform(node: NodeState, demand: Demand) -> bool:
    """Every free GPU of the node may take the demand: one model (``whole_nodes`` checked
    that ``where`` allows it), with the memory the demand asks for."""
    if len(node.models) != 1:
        return False
    least = demand.gpu_memory or 0
    return not least or all(gpu.memory_bytes >= least for gpu in node.gpus)


def whole_claim(node: NodeState, demand: Demand, where: Where) -> Claim:
    """A whole-GPU demand's GPUs on a node of ``whole_nodes``: of one domain if it can."""
    chosen = connected(whole_gpus_on(node, demand, where), demand.whole)
    return Claim(node, tuple([(gpu, 1.0, gpu.memory_bytes) for gpu in chosen]))


def connected(free: list[GpuState], wanted: int) -> list[GpuState]:
    """``wanted`` of the ``free`` GPUs, inside one connectivity domain when one has enough.

    Best fit between domains (the one with the fewest free GPUs that suffices), so that
    large domains stay whole for large jobs; with no such domain, the fewest domains.
    """
    if len({gpu.domain for gpu in free}) == 1:
        return free[:wanted]
    domains: dict[int, list[GpuState]] = defaultdict(list)
    for gpu in free:
        domains[gpu.domain].append(gpu)
    fitting = [group for group in domains.values() if len(group) >= wanted]
    if fitting:
        return min(fitting, key=lambda group: (len(group), group[0].position))[:wanted]
    largest_first = sorted(domains.values(), key=lambda group: (-len(group), group[0].position))
    chosen = [gpu for group in largest_first for gpu in group][:wanted]
    return sorted(chosen, key=lambda gpu: gpu.position)


def _shared_spots(demand: Demand, capacity: FreeCapacity, where: Where) -> Iterator[Claim]:
    least = least_fraction_share(demand, capacity.max_gpu_memory)
    for gpu in capacity.shared_from(least):
        if not where.gpu_ok(gpu):
            continue
        share, memory = fraction_demand(demand, gpu)
        if not fraction_fits(gpu, share, memory):
            continue
        node = capacity.nodes[gpu.rank]
        if host_fits(node, demand) and _node_ok(node, demand, where):
            yield Claim(node, ((gpu, share, memory),))


def _fresh_spots(demand: Demand, capacity: FreeCapacity, where: Where) -> Iterator[Claim]:
    for node in capacity.nodes_by_free_count(1):
        if not host_fits(node, demand) or not _node_ok(node, demand, where):
            continue
        fitting = [
            gpu
            for gpu in node.gpus
            if gpu.free and where.gpu_ok(gpu) and fraction_fits(gpu, *fraction_demand(demand, gpu))
        ]
        if fitting:
            [gpu] = connected(fitting, 1)  # the fullest connectivity domain
            share, memory = fraction_demand(demand, gpu)
            yield Claim(node, ((gpu, share, memory),))


def _host_spots(demand: Demand, capacity: FreeCapacity, where: Where) -> Iterator[Claim]:
    for node in capacity.nodes_by_free_count(0):
        if host_fits(node, demand) and (where.node_ok is None or where.node_ok(node, demand)):
            yield Claim(node, ())


def _node_ok(node: NodeState, demand: Demand, where: Where) -> bool:
    return not where.restricted or where.node_allowed(node, demand)
