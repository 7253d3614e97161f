"""The cycle's nominations: GPUs kept for a job that preempted for them (the Kubernetes
"nominated node", Kueue's nominate phase).

A job that preempts is nominated to the GPUs its victims free, and to those free beside
them (``Nomination``). While the nomination stands, its free GPUs are out of the free
capacity until the job's turn (``hold``, at the cycle's start; ``nominate``, when it
preempts); at its turn they go back to it first (``unhold``), and while its victims still
stop, it preempts nobody more and keeps them (``keep``). Given up (``drop``), its GPUs are
free for all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpupool.scheduler.capacity import Claim, FreeCapacity, GpuState
from gpupool.scheduler.fit import Demand
from gpupool.scheduler.preemption import Choice, Preemptor, RunningJob
from gpupool.scheduler.types import (
    NOMINATION_TTL,
    SHARE_EPSILON,
    Nomination,
    PendingJob,
    model_matches,
)


class Nominations:
    """The nominations of one cycle, and the GPUs they hold out of its free capacity."""

    def __init__(self, capacity: FreeCapacity, preemptor: Preemptor, now: float) -> None:
        self.capacity = capacity
        self.preemptor = preemptor
        self.now = now
        self.standing: dict[int, Nomination] = {}  # what the cycle's decisions keep
        self.holds: dict[int, list[Claim]] = {}  # their free GPUs, until their job's turn
        self.stopping_for: dict[int, list[RunningJob]] = {}  # victims still stopping
        # the jobs with a standing nomination not yet tried, and how many each team has
        self.untried: dict[int, str] = {}
        self.nominees: Counter[str] = Counter()

    def __contains__(self, job_id: int) -> bool:
        return job_id in self.standing

    def hold(self, nominations: Mapping[int, Nomination], jobs: Sequence[PendingJob]) -> None:
        """Keep the standing nominations that can still serve their job (one of ``jobs``,
        pending), and take their free GPUs out of the free capacity until that job's turn."""
        if not nominations:
            return
        pending = {job.job_id: job for job in jobs}
        busy, stopping = self._held_on({name for n in nominations.values() for name, _ in n.gpus})
        for job_id, nomination in sorted(nominations.items()):
            job = pending.get(job_id)
            if job is None:
                continue
            usable = self._usable(nomination, busy, stopping)
            if usable is None:
                continue
            claims, waiting = usable
            # bounded in time, but never while its victims still stop (a grace period may be long)
            if not waiting and self.now - nomination.at > NOMINATION_TTL:
                continue
            for claim in claims:
                self.capacity.take(claim, 0.0, 0)
            self.standing[job_id] = nomination
            self.untried[job_id] = job.team
            self.nominees[job.team] += 1
            self.holds[job_id] = claims
            if waiting:
                running = self.preemptor.running
                self.stopping_for[job_id] = [running[i] for i in sorted(waiting) if i in running]
                self.preemptor.taken.update(waiting)  # their GPUs are this job's: nobody's victims

    def _held_on(
        self, names: set[str]
    ) -> tuple[set[tuple[str, str]], dict[tuple[str, str], set[int]]]:
        """The GPUs of nodes ``names`` held by work that is not stopping, and the jobs
        stopping on each of the others, by (node, GPU uuid)."""
        capacity = self.capacity
        busy: set[tuple[str, str]] = set()
        stopping: dict[tuple[str, str], set[int]] = {}
        for name in names:
            node = capacity.by_name.get(name)
            if node is None:  # not in the pool: no nomination there can serve
                continue
            for allocation in capacity.held[node.rank]:  # what the node's GPUs hold
                for part in allocation.gpus:
                    where = (allocation.node, part.uuid)
                    if allocation.stopping:
                        stopping.setdefault(where, set()).add(allocation.job_id)
                    else:
                        busy.add(where)
        return busy, stopping

    def _usable(
        self,
        nomination: Nomination,
        busy: set[tuple[str, str]],
        stopping: dict[tuple[str, str], set[int]],
    ) -> tuple[list[Claim], set[int]] | None:
        """The claims on a nomination's free GPUs and the jobs still stopping on the others;
        None when it can no longer serve (a node gone, a GPU held by other work)."""
        claims: list[Claim] = []
        waiting: set[int] = set()
        for name, indices in nomination.gpus:
            node = self.capacity.by_name.get(name)
            if node is None:  # the node left the pool or is not schedulable
                return None
            by_index = {gpu.index: gpu for gpu in node.gpus}
            free: list[GpuState] = []
            for index in indices:
                gpu = by_index.get(index)
                if gpu is None or (name, gpu.uuid) in busy:
                    return None
                if gpu.free:
                    free.append(gpu)
                elif (name, gpu.uuid) in stopping:
                    waiting |= stopping[(name, gpu.uuid)]
                else:
                    return None
            if free:
                claims.append(Claim(node, tuple((gpu, 1.0, gpu.memory_bytes) for gpu in free)))
        return claims, waiting

    def tried(self, job_id: int) -> None:
        """The job's turn came (its first: a last try is not counted again)."""
        team = self.untried.pop(job_id, None)
        if team is not None:
            self.nominees[team] -= 1

    def unhold(self, job_id: int) -> list[Claim]:
        """The GPUs held for the job, back in the free capacity (for it to take first)."""
        claims = self.holds.pop(job_id, [])
        for claim in claims:
            self.capacity.give_back(claim, 0.0, 0)
        return claims

    def keep(self, job_id: int, claims: list[Claim]) -> None:
        """Hold ``claims`` (``unhold``'s) for the job again: its victims still stop."""
        for claim in claims:
            self.capacity.take(claim, 0.0, 0)
        self.holds[job_id] = claims

    def spent(self, job_id: int) -> None:
        """The job started, or its nomination is of no use: it ends."""
        self.standing.pop(job_id, None)
        self.stopping_for.pop(job_id, None)

    def drop(self, job_id: int) -> bool:
        """The job cannot use its nomination: its GPUs are free for all from now on.
        Whether that gave GPUs back to the free capacity."""
        grew = bool(self.unhold(job_id))
        self.spent(job_id)
        return grew

    def nominate(self, job: PendingJob, choice: Choice, demand: Demand) -> None:
        """Nominate the job to the GPUs its victims free (and those free beside them, which
        it takes out of the free capacity at once), as many as its tasks need."""
        wanted = demand.whole
        if not wanted:
            return  # fractions share GPUs with others: no GPU can be kept for them
        capacity = self.capacity
        shares: dict[tuple[str, str], float] = {}
        order: list[str] = []
        for victim in choice.victims:
            for allocation in victim.allocations:
                if allocation.node not in order:
                    order.append(allocation.node)
                for part in allocation.gpus:
                    key = (allocation.node, part.uuid)
                    shares[key] = shares.get(key, 0.0) + part.share
        need = wanted * job.tasks
        # in node order, whatever the order of the snapshot's allocations
        order.sort(key=lambda name: capacity.by_name[name].rank if name in capacity.by_name else -1)
        if job.tasks > 1:  # a gang counts on free GPUs of other nodes too
            order += [node.name for node in capacity.nodes if node.name not in order]
        chosen: list[tuple[str, tuple[int, ...]]] = []
        for name in order:
            node = capacity.by_name.get(name)
            if node is None or need <= 0:
                continue
            freed = [
                gpu
                for gpu in node.gpus
                if (name, gpu.uuid) in shares
                and (gpu.whole or abs(gpu.used_share - shares[(name, gpu.uuid)]) < SHARE_EPSILON)
            ]
            types = job.gpu_types
            free = [gpu for gpu in node.gpus if gpu.free and model_matches(types, gpu.model)]
            fits = (len(freed) + len(free)) // wanted * wanted
            gpus = (freed + free)[: min(fits, need)]
            if not gpus:
                continue
            need -= len(gpus)
            chosen.append((name, tuple(sorted(gpu.index for gpu in gpus))))
            now_free = [gpu for gpu in gpus if gpu.free]
            if now_free:
                claim = Claim(node, tuple((gpu, 1.0, gpu.memory_bytes) for gpu in now_free))
                capacity.take(claim, 0.0, 0)
                self.holds.setdefault(job.job_id, []).append(claim)
        if chosen:
            self.standing[job.job_id] = Nomination(job.job_id, tuple(chosen), self.now)


def being_freed(nomination: Nomination) -> str:
    """What a nominated job's reason adds: the GPUs being freed for it."""
    freed = " and ".join(
        f"GPU{'s' if len(indices) > 1 else ''} {_ranges(indices)} on {node}"
        for node, indices in nomination.gpus
    )
    verb = "is" if len(nomination.gpus) == 1 and len(nomination.gpus[0][1]) == 1 else "are"
    return f"{freed} {verb} being freed for it"


def _ranges(indices: tuple[int, ...]) -> str:
    """GPU indices as ranges: (0, 1, 2, 3, 6) -> "0-3, 6"."""
    parts: list[str] = []
    start = previous = None
    for index in sorted(indices):
        if previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(f"{start}-{previous}" if previous != start else f"{start}")
        start = previous = index
    if start is not None:
        parts.append(f"{start}-{previous}" if previous != start else f"{start}")
    return ", ".join(parts)
