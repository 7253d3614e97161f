"""Builds first: GPU jobs placed where their environment is not built wait for a CPU-only
build job there instead of holding their GPUs through the build.

Run by the schedule pipeline between the scheduler's decisions and the launch: of the
placements of jobs that ask for GPUs and want an environment the node has not said it holds
(``NodeCache.reported``: what placed jobs will fetch does not count here, their builds are
not done), it asks ``services.jobs.build_first`` (one transaction) which jobs now wait and
which build jobs were made, and hands the launch pipeline the other placements plus the new
build jobs, each in the spot of the job it builds for (its CPUs and memory, no GPU).
"""

from __future__ import annotations

from collections import defaultdict

from gpupool.domain.locality import ENV
from gpupool.scheduler.types import Clock, Placement
from gpupool.services import jobs as job_service
from gpupool.services.scheduling import SnapshotBuilder
from gpupool.settings import Settings
from gpupool.store.db import Database


class BuildsFirst:
    def __init__(
        self, db: Database, clock: Clock, snapshots: SnapshotBuilder, settings: Settings
    ) -> None:
        self.db, self.clock, self.snapshots = db, clock, snapshots
        self.limits = job_service.BuildLimits(
            settings.env_build_cpus,
            settings.env_build_memory_bytes,
            settings.env_build_timeout_seconds,
        )

    def divert(self, placements: list[Placement]) -> list[Placement]:
        """The placements to launch: those of jobs now waiting for builds replaced by the
        build jobs made for them."""
        lacking: dict[int, list[job_service.Lacking]] = defaultdict(list)
        for placement in placements:
            job = self.snapshots.pending_of(placement.job_id)
            if job is None or not job.request.uses_gpus:
                continue
            env = next((w.key for w in job.wants if w.key.startswith(f"{ENV}:")), None)
            if env is not None and env not in self.snapshots.nodes.reported(placement.node):
                lacking[placement.job_id].append(
                    job_service.Lacking(placement.node, placement.cpus, placement.memory_bytes)
                )
        if not lacking:
            return placements
        with self.db.session() as session:
            waiting, made = job_service.build_first(session, lacking, self.limits, self.clock.now())
        for job_id in waiting:
            self.snapshots.forget(job_id)
        kept = [p for p in placements if p.job_id not in waiting]
        return kept + [Placement(b.job_id, b.node, (), b.cpus, b.memory_bytes) for b in made]
