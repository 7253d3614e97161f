"""The control loop as services see it (``services.core.LoopSide``): what its pipelines
know — why jobs wait, the nodes' capacities, start estimates, counters — and what services
tell it: schedule now, the quotas or weights changed, stops were recorded elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpupool.domain.policy import Policy
from gpupool.domain.waiting import PendingReason
from gpupool.loops.schedule import Scheduling
from gpupool.loops.stops import Stops
from gpupool.scheduler.types import NodeCapacity, Nomination
from gpupool.services.core import Forecast, LoopStats
from gpupool.services.scheduling import EtaPredictor, SnapshotBuilder
from gpupool.store.db import Database


class LoopFace:
    """Implements ``services.core.LoopSide`` over the control pipelines; thread-safe as far
    as services need (they read the latest cycle's results and wake the driver)."""

    def __init__(
        self,
        db: Database,
        scheduling: Scheduling,
        stops: Stops,
        etas: EtaPredictor,
        stats: LoopStats,
        wake: Callable[[], None],
    ) -> None:
        self.db, self.scheduling, self.stops, self.etas = db, scheduling, stops, etas
        self.wake, self._stats = wake, stats

    @property
    def pending_reasons(self) -> Mapping[int, PendingReason]:
        return self.scheduling.pending_reasons

    @property
    def nominations(self) -> Mapping[int, Nomination]:
        """The GPUs being freed for each preempting job, as the latest cycle left them."""
        return self.scheduling.nominations

    @property
    def snapshots(self) -> SnapshotBuilder:
        """The scheduling pipeline's snapshot builder (its caches of quotas and weights)."""
        return self.scheduling.snapshots

    @property
    def stats(self) -> LoopStats:
        return self._stats

    def recent_nodes(self) -> tuple[NodeCapacity, ...]:
        """The nodes' capacities, read at most a second ago (a submit checks it could run)."""
        return self.scheduling.snapshots.nodes.recent(self.db)

    def forecast(self, now: float, job_id: int | None = None) -> Forecast:
        """Estimated starts, in the order of the latest cycle's reasons."""
        return self.etas.forecast(self.db, now, self.scheduling.pending_reasons, job_id)

    def quotas_changed(self) -> None:
        """An admin changed teams or quotas: every snapshot reads them again; schedule."""
        self.scheduling.snapshots.quotas_changed()
        self.etas.builder.quotas_changed()
        self.wake()

    def weights_changed(self) -> None:
        """An admin changed users' weights: every snapshot reads them again; schedule."""
        self.scheduling.snapshots.weights_changed()
        self.etas.builder.weights_changed()
        self.wake()

    def policy_changed(self, policy: Policy) -> None:
        """The scheduler's live settings changed: every snapshot uses ``policy``; schedule."""
        self.scheduling.snapshots.use_policy(policy)
        self.etas.builder.use_policy(policy)
        self.wake()

    def stops_recorded(self) -> None:
        """Stops were recorded on attempts in the database by another thread (the storage
        watch): read them at the next pass and send them."""
        self.stops.recorded_elsewhere()
        self.wake()
