"""The control loop: reconcile observed state, schedule, dispatch.

Each pass (1) polls the executor for every active attempt and records transitions, (2) stops
attempts whose job was cancelled, (3) builds a snapshot and asks the pure scheduler for
decisions, (4) records each placement durably, then launches it. Slow work (process launch,
polling) happens outside any transaction; every write is guarded by a conditional update.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select, update

from gpupool.domain.jobs import JobSpec, JobStatus, Reason
from gpupool.executors.base import Executor, Handle, LaunchError, Observed, PollResult, TaskSpec
from gpupool.scheduler import schedule
from gpupool.scheduler.types import Clock, Decisions, PendingReason, Placement, Snapshot
from gpupool.services import jobs as job_service
from gpupool.services import nodes as node_service
from gpupool.services.snapshots import SnapshotBuilder, placement_json
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import AttemptModel, JobModel

log = logging.getLogger(__name__)

ACTIVE_ATTEMPT = ("starting", "running", "stopping")
BUSY_TICK = 0.02  # seconds between polls while work runs; exits are seen this fast


@dataclass
class ActiveAttempt:
    attempt_id: int
    job_id: int
    number: int
    handle: Handle
    observed: Observed = Observed.STARTING
    stop_sent: bool = False


class ControlLoop:
    """Runs in one background thread of the server; ``wake`` makes it act at once."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        settings: Settings,
        clock: Clock,
        decide: Callable[[Snapshot, Clock], Decisions] = schedule,
    ) -> None:
        self.db, self.executor, self.settings, self.clock = db, executor, settings, clock
        self.decide = decide
        self.pending_reasons: dict[int, PendingReason] = {}
        self._active: dict[int, ActiveAttempt] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_codes: dict[int, tuple[str, str]] = {}
        self._last_schedule = 0.0
        self.snapshots = SnapshotBuilder()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.readopt()
        self._thread = threading.Thread(target=self._run, name="gpupool-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            woken = self._wake.is_set()
            self._wake.clear()
            try:
                self.run_once(force_schedule=woken)
            except Exception:  # the loop must outlive any one bad pass
                log.exception("control loop pass failed")
            tick = BUSY_TICK if self._active else self.settings.schedule_interval_seconds
            self._wake.wait(tick)

    # -- one pass ----------------------------------------------------------------------------

    def run_once(self, force_schedule: bool = True) -> None:
        changed = self.reconcile()
        self.stop_cancelled()
        overdue = time.monotonic() - self._last_schedule > self.settings.schedule_interval_seconds
        if changed or force_schedule or overdue:
            self._last_schedule = time.monotonic()
            self.schedule_and_dispatch()

    def readopt(self) -> None:
        """After a (re)start: take back every attempt that was launched and not yet ended."""
        with self.db.session() as session:
            rows = session.scalars(
                select(AttemptModel).where(AttemptModel.status.in_(ACTIVE_ATTEMPT))
            ).all()
            for row in rows:
                self._readopt_one(session, row)

    def _readopt_one(self, session, row: AttemptModel) -> None:  # noqa: ANN001
        if row.executor_state:
            handle = self.executor.load_state(row.executor_state)
        else:  # recorded, then the server died before it could record the launch
            handle = self.executor.recover(row.job_id, row.number)
        if handle is None:
            row.status, row.ended_at = "never_launched", self.clock.now()
            job = session.get(JobModel, row.job_id)
            self._requeue(
                session, job, self.clock.now(), f"attempt {row.number} never launched; requeued"
            )
            return
        row.executor_state = self.executor.get_state(handle)
        observed = Observed.RUNNING if row.status == "running" else Observed.STARTING
        self._active[row.id] = ActiveAttempt(row.id, row.job_id, row.number, handle, observed)
        job_service.record(
            session,
            row.job_id,
            self.clock.now(),
            Reason.READOPTED,
            f"server restarted; attempt {row.number} re-adopted on {row.node}",
        )

    # -- (1) reconcile -----------------------------------------------------------------------

    def reconcile(self) -> bool:
        """Poll every active attempt; record what changed. True if anything did."""
        changed = False
        for active in list(self._active.values()):
            result = self.executor.poll(active.handle)
            if result.observed == active.observed:
                continue
            changed = True
            self._transition(active, result)
        return changed

    def _transition(self, active: ActiveAttempt, result: PollResult) -> None:
        ended = result.observed in (Observed.EXITED, Observed.LOST)
        if ended and active.observed == Observed.STARTING and result.started_at:
            self._record_running(active, result)  # it started and ended between two polls
        if result.observed == Observed.RUNNING:
            self._record_running(active, result)
        elif result.observed == Observed.EXITED:
            self._record_exit(active, result)
        elif result.observed == Observed.LOST:
            self._record_lost(active, result)
        active.observed = result.observed

    def _record_running(self, active: ActiveAttempt, result: PollResult) -> None:
        now = result.started_at or self.clock.now()
        with self.db.session() as session:
            attempt = session.get(AttemptModel, active.attempt_id)
            attempt.status, attempt.started_at = "running", now
            job = session.get(JobModel, active.job_id)
            if job.status == JobStatus.STARTING.value:
                job.status, job.started_at = JobStatus.RUNNING.value, now
                job.reason, job.message = Reason.STARTED.value, f"running on {attempt.node}"
                job_service.record(
                    session,
                    job.id,
                    now,
                    Reason.STARTED,
                    f"attempt {attempt.number} started on {attempt.node}",
                )

    def _record_exit(self, active: ActiveAttempt, result: PollResult) -> None:
        now = result.ended_at or self.clock.now()
        code = result.exit_code
        with self.db.session() as session:
            attempt = session.get(AttemptModel, active.attempt_id)
            attempt.status, attempt.ended_at, attempt.exit_code = "exited", now, code
            attempt.started_at = attempt.started_at or result.started_at
            job = session.get(JobModel, active.job_id)
            job.started_at = job.started_at or result.started_at
            status, reason, message = _exit_outcome(job, code)
            job_service.finish(session, job, status, now, reason, message, exit_code=code)
        self._forget(active)

    def _record_lost(self, active: ActiveAttempt, result: PollResult) -> None:
        now = self.clock.now()
        message = result.message or (
            f"the runner of attempt {active.number} vanished without recording an exit"
        )
        with self.db.session() as session:
            attempt = session.get(AttemptModel, active.attempt_id)
            attempt.status, attempt.ended_at = "lost", now
            job = session.get(JobModel, active.job_id)
            if result.started_at is None and not job.cancel_requested_at and not attempt.started_at:
                self._requeue(session, job, now, f"attempt {active.number} never started; requeued")
            else:
                job_service.finish(session, job, JobStatus.LOST, now, Reason.LOST, message)
        self._forget(active)

    def _requeue(self, session, job: JobModel, now: float, message: str) -> None:  # noqa: ANN001
        if job.cancel_requested_at is not None:
            job_service.finish(session, job, JobStatus.CANCELLED, now, Reason.CANCELLED, message)
            return
        job.status, job.node, job.placement = JobStatus.PENDING.value, None, None
        job.reason, job.message = Reason.REQUEUED.value, message
        job_service.record(session, job.id, now, Reason.REQUEUED, message)

    def _forget(self, active: ActiveAttempt) -> None:
        self._active.pop(active.attempt_id, None)
        self.executor.release(active.handle)

    # -- (2) cancellations -------------------------------------------------------------------

    def stop_cancelled(self) -> None:
        with self.db.reader() as session:
            wanted = set(
                session.scalars(
                    select(JobModel.id).where(
                        JobModel.cancel_requested_at.is_not(None),
                        JobModel.status.in_(node_service.ACTIVE),
                    )
                )
            )
        for active in self._active.values():
            if active.job_id in wanted and not active.stop_sent:
                self.executor.stop(active.handle, self.settings.stop_grace_seconds)
                active.stop_sent = True

    # -- (3) schedule and (4) dispatch -------------------------------------------------------

    def schedule_and_dispatch(self) -> None:
        with self.db.reader() as session:
            snapshot = self.snapshots.build(session)
        decisions = self.decide(snapshot, self.clock)
        self.pending_reasons = decisions.pending
        self._record_reasons(decisions.pending)
        for placement in decisions.placements:
            self._dispatch(placement)

    def _record_reasons(self, reasons: dict[int, PendingReason]) -> None:
        """Write a pending job's reason only when it changes (positions stay in memory)."""
        changed = {
            job_id: r
            for job_id, r in reasons.items()
            if self._last_codes.get(job_id) != (r.code.value, r.message)
        }
        if not changed:
            return
        now = self.clock.now()
        with self.db.session() as session:
            for job_id, reason in changed.items():
                done = session.execute(
                    update(JobModel)
                    .where(JobModel.id == job_id, JobModel.status == JobStatus.PENDING.value)
                    .values(reason=reason.code.value, message=reason.message)
                )
                previous = self._last_codes.get(job_id, ("",))[0]
                if done.rowcount and previous != reason.code.value:
                    job_service.record(session, job_id, now, reason.code, reason.message)
                self._last_codes[job_id] = (reason.code.value, reason.message)
        for job_id in list(self._last_codes):
            if job_id not in reasons:
                del self._last_codes[job_id]

    def _dispatch(self, placement: Placement) -> None:
        """Record the attempt durably, then launch it (at most once)."""
        task = self._claim(placement)
        if task is None:
            return
        attempt_id, spec = task
        try:
            handle = self.executor.start(spec)
        except LaunchError as error:
            log.warning("launch of job %s failed: %s", spec.job_id, error)
            self._launch_failed(attempt_id, spec, error)
            return
        with self.db.session() as session:
            attempt = session.get(AttemptModel, attempt_id)
            attempt.executor_state = self.executor.get_state(handle)
        self._active[attempt_id] = ActiveAttempt(attempt_id, spec.job_id, spec.attempt, handle)

    def _claim(self, placement: Placement) -> tuple[int, TaskSpec] | None:
        now = self.clock.now()
        data = placement_json(placement)
        with self.db.session() as session:
            claimed = session.execute(
                update(JobModel)
                .where(
                    JobModel.id == placement.job_id,
                    JobModel.status == JobStatus.PENDING.value,
                    JobModel.cancel_requested_at.is_(None),
                )
                .values(
                    status=JobStatus.STARTING.value,
                    attempts=JobModel.attempts + 1,
                    node=placement.node,
                    placement=data,
                    reason=Reason.PLACED.value,
                    message=f"placed on {describe(placement)}",
                )
            )
            if not claimed.rowcount:
                return None
            job = session.get(JobModel, placement.job_id)
            session.refresh(job)
            attempt = AttemptModel(
                job_id=job.id,
                number=job.attempts,
                node=placement.node,
                placement=data,
                status="starting",
                created_at=now,
            )
            session.add(attempt)
            session.flush()
            job_service.record(
                session, job.id, now, Reason.PLACED, f"placed on {describe(placement)}"
            )
            return attempt.id, self._task(job, attempt.number, placement)

    def _task(self, job: JobModel, number: int, placement: Placement) -> TaskSpec:
        spec = JobSpec.model_validate(job.spec)
        return TaskSpec(
            job_id=job.id,
            attempt=number,
            node=placement.node,
            command=spec.command,
            env=spec.env,
            workdir=spec.workdir,
            gpu_uuids=[gpu.uuid for gpu in placement.gpus],
            log_limit_bytes=self.settings.log_limit_bytes,
            stop_grace_seconds=self.settings.stop_grace_seconds,
        )

    def _launch_failed(self, attempt_id: int, task: TaskSpec, error: LaunchError) -> None:
        now = self.clock.now()
        with self.db.session() as session:
            attempt = session.get(AttemptModel, attempt_id)
            attempt.status, attempt.ended_at = "launch_failed", now
            job = session.get(JobModel, task.job_id)
            job_service.finish(
                session, job, JobStatus.FAILED, now, Reason.LAUNCH_FAILED, error.user_message
            )


def describe(placement: Placement) -> str:
    if not placement.gpus:
        return f"{placement.node} (no GPU)"
    parts = [g.uuid if g.share >= 1 else f"{g.uuid} ({g.share:g} of it)" for g in placement.gpus]
    return f"{placement.node}: " + ", ".join(parts)


def _exit_outcome(job: JobModel, code: int | None) -> tuple[JobStatus, Reason, str]:
    if job.cancel_requested_at is not None:
        return (
            JobStatus.CANCELLED,
            Reason.CANCELLED,
            f"cancelled; the process ended with code {code}",
        )
    if code == 0:
        return JobStatus.SUCCEEDED, Reason.EXITED, "exited with code 0"
    return JobStatus.FAILED, Reason.EXITED, f"exited with code {code}"
