"""The control pipelines built together: one ``Control`` per server.

``Control.open`` gives each pipeline only the ports it uses — the database, the clock, the
executor, the shared table of active attempts, the counters, the few settings values it
reads — and wires them: the scheduling cycle hands preemptions to the stops pipeline and
placements to the launch pipeline; an attempt forgotten by reconcile is forgotten by the
checkpoints and the snapshot builder too. The driver runs them in the control thread; the
face (``LoopFace``) is what services see.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from gpupool.executors.base import Executor
from gpupool.loops.active import ActiveAttempts
from gpupool.loops.checkpoints import Checkpoints
from gpupool.loops.dependencies import Dependencies
from gpupool.loops.driver import Driver
from gpupool.loops.envbuilds import BuildsFirst
from gpupool.loops.face import LoopFace
from gpupool.loops.launch import Launch, TaskMaker
from gpupool.loops.readopt import Readopt
from gpupool.loops.reconcile import Reconcile
from gpupool.loops.schedule import Scheduling
from gpupool.loops.stops import Stops
from gpupool.scheduler import schedule
from gpupool.scheduler.state import Schedule
from gpupool.scheduler.types import Clock
from gpupool.services import environments, schedsettings
from gpupool.services.core import LoopStats
from gpupool.services.datasets import s3_of
from gpupool.services.images import image_layout
from gpupool.services.jobs import CheckpointWatcher, code_archive_path
from gpupool.services.models import model_archive_path
from gpupool.services.scheduling import EtaPredictor, SnapshotBuilder
from gpupool.settings import Settings
from gpupool.store.db import Database


@dataclass(frozen=True)
class Control:
    """The control pipelines, their driver and their face."""

    actives: ActiveAttempts
    readopt: Readopt
    reconcile: Reconcile
    stops: Stops
    checkpoints: Checkpoints
    launch: Launch
    scheduling: Scheduling
    driver: Driver
    face: LoopFace

    @classmethod
    def open(
        cls,
        db: Database,
        executor: Executor,
        settings: Settings,
        clock: Clock,
        decide: Schedule = schedule,
    ) -> Control:
        stats = LoopStats()  # job starts and ends, cycle times: read by /metrics
        actives = ActiveAttempts(executor)
        snapshots = SnapshotBuilder.of(settings)
        snapshots.use_policy(schedsettings.live_policy(db, settings))  # the site's live version
        actives.on_forget.append(lambda _attempt_id, job_id: snapshots.forget(job_id))
        tasks = TaskMaker(
            log_limit_bytes=settings.log_limit_bytes,
            default_grace=settings.stop_grace_seconds,
            code_archive=partial(code_archive_path, settings),
            model_archive=partial(model_archive_path, settings.models_dir),
            environment=environments.launch_lookup(db),
            datasets_store=settings.datasets_dir,
            datasets_s3=s3_of(settings),
            volumes_store=settings.volumes_dir,
            image_layout=partial(image_layout, settings),
        )
        stops = Stops(db, clock, executor, actives)
        launch = Launch(db, clock, executor, actives, stats, tasks)
        scheduling = Scheduling(
            db,
            clock,
            snapshots,
            decide,
            executor.isolation,
            stops.preempt,
            launch.run,
            settings.explain_interval_seconds,
            BuildsFirst(db, clock, snapshots, settings) if settings.env_build_jobs else None,
        )
        readopt = Readopt(db, clock, executor, actives, tasks.grace)
        reconcile = Reconcile(db, clock, executor, actives, stats)
        watcher = CheckpointWatcher(executor, settings.checkpoint_scan_seconds)
        checkpoints = Checkpoints(db, clock, actives, watcher)
        driver = Driver(
            executor,  # its changes only (``driver.Changes``)
            actives,
            readopt,
            reconcile,
            stops,
            checkpoints,
            launch,
            scheduling,
            stats,
            settings.schedule_interval_seconds,
        )
        # jobs that wait for others: queued (or cancelled) before the cycle that may start them
        driver.before_schedule.append(Dependencies(db, clock).run)
        # estimated start times, for the API (computed there, on demand, from its own snapshot)
        etas = EtaPredictor(
            snapshots.nodes, snapshots.policy.usage_half_life, policy=snapshots.policy
        )

        def wake() -> None:  # a submit, a cancel, a node's change: schedule and read cancels
            stops.look_for_cancels()
            driver.wake()

        face = LoopFace(db, scheduling, stops, etas, stats, wake)
        return cls(
            actives, readopt, reconcile, stops, checkpoints, launch, scheduling, driver, face
        )

    def start(self) -> None:
        """Take back the attempts left running, then start the control thread."""
        self.driver.start()

    def stop(self) -> None:
        self.driver.stop()
