"""The control loop: reconcile observed state, stop, schedule, preempt, dispatch.

Each pass (1) polls the executor for every active attempt and records transitions, (2) stops
attempts whose job was cancelled or ran past its max runtime, and notes new checkpoints,
(3) builds a snapshot and asks the pure scheduler for decisions, (4) records and sends the
preemptions it asks for, (5) records each placement durably, then launches it. Slow work
(process launch, polling, signals) happens outside any transaction; every write is guarded
by a conditional update, and a stop is recorded before it is sent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select as io_select
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sqlalchemy import bindparam, insert, select, update

from gpupool.domain.deployments import REPLICA_TOKEN_ENV
from gpupool.domain.isolation import IsolationStatus
from gpupool.domain.jobs import JobSpec, JobStatus, Reason, StopReason
from gpupool.domain.notebooks import token_env as notebook_token_env
from gpupool.domain.waiting import PendingReason
from gpupool.errors import StorageFull
from gpupool.executors.base import Executor, Handle, LaunchError
from gpupool.executors.task import GpuGrant, Observed, TaskSpec
from gpupool.scheduler import schedule
from gpupool.scheduler.types import (
    Clock,
    Decisions,
    NodeCapacity,
    Nomination,
    Placement,
    Preemption,
    Schedule,
)
from gpupool.services import cluster as cluster_service
from gpupool.services import jobs as job_service
from gpupool.services.cluster import node_addresses
from gpupool.services.core import Forecast, LoopStats
from gpupool.services.jobs import CheckpointWatcher, Watched
from gpupool.services.jobs import code_archive_path as archive_path
from gpupool.services.models import model_archive_path as model_archive
from gpupool.services.scheduling import EtaPredictor, SnapshotBuilder, gang_json
from gpupool.settings import Settings
from gpupool.store.db import Database
from gpupool.store.models import (
    AttemptModel,
    DeploymentReplicaModel,
    EventModel,
    JobArrayModel,
    JobModel,
    NotebookModel,
    UserModel,
)

log = logging.getLogger(__name__)

ACTIVE_ATTEMPT = ("starting", "running", "orphaned")
# Runners announce every state change through the executor's change_fd, so polling is only
# a safety net (a runner killed with SIGKILL announces nothing).
BUSY_POLL = 0.25
MAX_REST = 0.25
SUBMIT_REST_FACTOR = 5
BATCH_WINDOW = 0.01
FULL_DISK_LOG_SECONDS = 60.0
PARALLEL_LAUNCHES = 16  # launches in flight at once on a pool (nodes' agents answer in parallel)
# launches that failed through no fault of the job: it goes back to the queue
REQUEUED_LAUNCHES = frozenset({"storage_full", "node_unreachable"})


@dataclass
class ActiveAttempt:
    """An attempt this loop watches. ``grace``: its job's SIGTERM-to-SIGKILL time;
    ``stop_reason``: a stop recorded in the database (sent once ``stop_sent``)."""

    attempt_id: int
    job_id: int
    number: int
    handle: Handle
    observed: Observed = Observed.STARTING
    stop_sent: bool = False
    grace: float = 30.0
    max_runtime: float | None = None
    started_at: float | None = None
    stop_reason: StopReason | None = None

    def past_max_runtime(self, now: float) -> bool:
        return (
            self.max_runtime is not None
            and self.started_at is not None
            and now - self.started_at > self.max_runtime
        )

    def watched(self) -> Watched:
        return Watched(self.attempt_id, self.job_id, self.number, self.handle)


@dataclass(frozen=True)
class Claimed:
    """An attempt recorded for a job's placements, ready to launch: one task per placement
    (several for a job over several nodes, launched together)."""

    attempt_id: int
    tasks: list[TaskSpec]
    max_runtime: float | None

    @property
    def task(self) -> TaskSpec:
        return self.tasks[0]

    @property
    def gang(self) -> bool:
        return self.task.in_gang


class ControlLoop:
    """Runs in one background thread of the server; ``wake`` makes it act at once."""

    def __init__(
        self,
        db: Database,
        executor: Executor,
        settings: Settings,
        clock: Clock,
        decide: Schedule = schedule,
    ) -> None:
        self.db, self.executor, self.settings, self.clock = db, executor, settings, clock
        self.decide = decide
        self.pending_reasons: dict[int, PendingReason] = {}
        self.stats = LoopStats()  # job starts and ends, cycle times: read by /metrics
        # the GPUs each preempting job's victims are freeing for it, from the last cycle to the
        # next (the scheduler keeps them for it and drops them when it starts or cannot use
        # them). Kept in memory only: a restart loses them, which is acceptable — the victims
        # still stop and are requeued, and at worst a job preempts once more after a restart.
        self.nominations: dict[int, Nomination] = {}
        self._active: dict[int, ActiveAttempt] = {}
        # launches that failed and whose failure is not recorded yet (a commit failed)
        self._failed_launches: list[tuple[int, TaskSpec, LaunchError]] = []
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_codes: dict[int, tuple[str, str]] = {}
        self._last_schedule = 0.0
        self._full_said_at = -math.inf
        self._explained_at = -math.inf  # when a cycle last explained the jobs left pending
        # set by another thread (the storage watch) that recorded stops in the database
        self._stops_recorded = threading.Event()
        self.snapshots = SnapshotBuilder.of(settings)
        self.checkpoints = CheckpointWatcher(executor, settings.checkpoint_scan_seconds)
        # estimated start times, for the API (computed there, on demand, from its own snapshot)
        self.etas = EtaPredictor(
            self.snapshots.nodes,
            settings.fair_share_half_life_seconds,
            policy=self.snapshots.policy,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.readopt()
        self._thread = threading.Thread(target=self._run, name="gpupool-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the loop; running attempts are left to run (a restart re-adopts them)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.wake()
        if self._thread:
            self._thread.join(timeout=10)
        wake_r, wake_w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, -1, -1
        os.close(wake_r)
        os.close(wake_w)

    def wake(self) -> None:
        """Make the loop schedule at once (after a submit, a cancel, a node change)."""
        if self._wake_w < 0:  # stopped: never write into a number the OS may have reused
            return
        with contextlib.suppress(OSError):  # full: a wake is pending anyway
            os.write(self._wake_w, b"!")

    # -- what services ask and tell (services.core.LoopSide) -------------------------------

    def stops_recorded(self) -> None:
        """Stops were recorded on attempts in the database by another thread (the storage
        watch): read them at the next pass and send them."""
        self._stops_recorded.set()
        self.wake()

    def recent_nodes(self) -> tuple[NodeCapacity, ...]:
        """The nodes' capacities, read at most a second ago (a submit checks it could run)."""
        return self.snapshots.nodes.recent(self.db)

    def forecast(self, now: float, job_id: int | None = None) -> Forecast:
        """Estimated starts, in the order of the latest cycle's reasons."""
        return self.etas.forecast(self.db, now, self.pending_reasons, job_id)

    def quotas_changed(self) -> None:
        """An admin changed teams or quotas: every snapshot reads them again; schedule."""
        self.snapshots.quotas_changed()
        self.etas.builder.quotas_changed()
        self.wake()

    def weights_changed(self) -> None:
        """An admin changed users' weights: every snapshot reads them again; schedule."""
        self.snapshots.weights_changed()
        self.etas.builder.weights_changed()
        self.wake()

    def _run(self) -> None:
        woken = True
        while not self._stopping.is_set():
            began = time.monotonic()
            ended_work = False
            try:
                ended_work = self.run_once(force_schedule=woken)
            except StorageFull:  # nothing was recorded: the next pass does it all again
                self._say_storage_full()
            except Exception:  # the loop must outlive any one bad pass
                log.exception("control loop pass failed")
            # A pass costs time in proportion to the queue. Under a stream of submits, passes
            # back to back would starve the API of the CPU and the database's write lock, so
            # the loop rests a few times as long as its pass took and one pass serves many
            # submits. When work just ended, GPUs are idle: it rests only as long.
            factor = 1 if ended_work else SUBMIT_REST_FACTOR
            self._stopping.wait(min(factor * (time.monotonic() - began), MAX_REST))
            tick = BUSY_POLL if self._active else self.settings.schedule_interval_seconds
            woken = self._wait(tick)
            if woken:  # submits come in bursts: let a burst gather into one pass
                self._stopping.wait(BATCH_WINDOW)

    def _say_storage_full(self) -> None:
        now = time.monotonic()
        if now - self._full_said_at >= FULL_DISK_LOG_SECONDS:
            self._full_said_at = now
            log.warning("the disk is full: nothing can be recorded; retrying until there is room")

    def _wait(self, timeout: float) -> bool:
        """Sleep until woken, an attempt changes, or the timeout; True if woken."""
        changes = self.executor.change_fd()
        fds = [self._wake_r] if changes is None else [self._wake_r, changes]
        ready, _, _ = io_select.select(fds, [], [], timeout)
        if changes in ready:
            self.executor.clear_changes()
        if self._wake_r not in ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        return True

    # -- one pass ----------------------------------------------------------------------------

    def run_once(self, force_schedule: bool = True) -> bool:
        """One pass; True if some attempt changed state.

        Every step marks what it observed only once its transaction committed, so a pass
        that fails (a full disk) is simply done again by the next one."""
        self._record_failed_launches()
        changed = self.reconcile()
        self.stop_what_must_end()
        self.note_checkpoints()
        overdue = time.monotonic() - self._last_schedule > self.settings.schedule_interval_seconds
        if changed or force_schedule or overdue:
            self._last_schedule = time.monotonic()
            self.schedule_and_dispatch()
            self.stats.cycle(time.monotonic() - self._last_schedule)
        return changed

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
            handle = self.executor.recover(row.job_id, row.number, row.node)
        if handle is None:
            row.status, row.ended_at = "never_launched", self.clock.now()
            job = session.get(JobModel, row.job_id)
            message = f"attempt {row.number} never launched; requeued"
            job_service.requeue(session, job, self.clock.now(), message)
            return
        row.executor_state = self.executor.get_state(handle)
        observed = {"running": Observed.RUNNING, "orphaned": Observed.ORPHANED}.get(
            row.status, Observed.STARTING
        )
        spec = JobSpec.stored(session.get(JobModel, row.job_id).spec)
        self._active[row.id] = ActiveAttempt(
            row.id,
            row.job_id,
            row.number,
            handle,
            observed,
            grace=self._grace(spec),
            max_runtime=spec.max_runtime_seconds,
            started_at=row.started_at,
            stop_reason=StopReason(row.stop_reason) if row.stop_reason else None,
        )  # a stop recorded before the restart is sent again: stop() is idempotent
        job_service.record(
            session,
            row.job_id,
            self.clock.now(),
            Reason.READOPTED,
            f"server restarted; attempt {row.number} re-adopted on {row.node}",
        )

    # -- (1) reconcile -----------------------------------------------------------------------

    def reconcile(self) -> bool:
        """Poll every active attempt; record all that changed in one transaction."""
        actives = list(self._active.values())
        seen = list(zip(actives, self.executor.poll_all([a.handle for a in actives]), strict=True))
        changed = [
            (active, result) for active, result in seen if result.observed != active.observed
        ]
        if not changed:
            return False
        now = self.clock.now()
        started: dict[int, float | None] = {}
        outcomes: dict[int, str] = {}  # the job's status once the attempt's change is recorded
        with self.db.session() as session:
            attempts, jobs = self._rows(session, [active for active, _ in changed])
            for active, result in changed:
                attempt = attempts[active.attempt_id]
                if attempt.executor_state is None:
                    attempt.executor_state = self.executor.get_state(active.handle)
                job_service.apply_transition(session, attempt, jobs[active.job_id], result, now)
                started[active.attempt_id] = attempt.started_at
                outcomes[active.attempt_id] = jobs[active.job_id].status
        for active, result in changed:  # committed: only now is it observed
            active.observed, active.started_at = result.observed, started[active.attempt_id]
            if result.observed in (Observed.EXITED, Observed.LOST):
                self._forget(active)
                self.stats.ended(_outcome(outcomes[active.attempt_id]))
        return True

    def _rows(
        self,
        session,
        actives: list[ActiveAttempt],  # noqa: ANN001
    ) -> tuple[dict[int, AttemptModel], dict[int, JobModel]]:
        attempt_ids = [active.attempt_id for active in actives]
        job_ids = [active.job_id for active in actives]
        attempts = session.scalars(select(AttemptModel).where(AttemptModel.id.in_(attempt_ids)))
        jobs = session.scalars(select(JobModel).where(JobModel.id.in_(job_ids)))
        return {a.id: a for a in attempts}, {j.id: j for j in jobs}

    def _forget(self, active: ActiveAttempt) -> None:
        self._active.pop(active.attempt_id, None)
        self.checkpoints.forget(active.attempt_id)
        self.snapshots.forget(active.job_id)
        self.executor.release(active.handle)

    # -- (2) stops and checkpoints -----------------------------------------------------------

    def stop_what_must_end(self) -> None:
        """Stop attempts of cancelled jobs and attempts past their job's max runtime; send
        stops recorded but not sent yet (before a restart)."""
        now = self.clock.now()
        if self._stops_recorded.is_set():
            self._stops_recorded.clear()
            self._read_recorded_stops()
        cancelled = self._cancelled_jobs()
        requests = []
        for active in self._active.values():
            if active.stop_sent:
                continue
            if active.job_id in cancelled:
                requests.append(job_service.cancelled(active.attempt_id, active.job_id))
            elif active.past_max_runtime(now):
                requests.append(
                    job_service.past_max_runtime(
                        active.attempt_id, active.job_id, active.max_runtime, active.grace
                    )
                )
            elif active.stop_reason is not None:
                self._send_stop(active)
        self._stop(requests)

    def _read_recorded_stops(self) -> None:
        with self.db.reader() as session:
            rows = session.execute(
                select(AttemptModel.id, AttemptModel.stop_reason).where(
                    AttemptModel.id.in_(list(self._active)),
                    AttemptModel.stop_reason.is_not(None),
                )
            ).all()
        for attempt_id, reason in rows:
            active = self._active.get(attempt_id)
            if active is not None and active.stop_reason is None:
                active.stop_reason = StopReason(reason)

    def _cancelled_jobs(self) -> set[int]:
        with self.db.reader() as session:
            return set(
                session.scalars(
                    select(JobModel.id).where(
                        JobModel.cancel_requested_at.is_not(None),
                        JobModel.status.in_(cluster_service.ACTIVE),
                    )
                )
            )

    def _stop(self, requests: list[job_service.StopRequest]) -> None:
        """Record every stop in one transaction, then ask the executor (recorded first, so
        that the attempt's end is read the way the stop meant it)."""
        if not requests:
            return
        now = self.clock.now()
        with self.db.session() as session:
            recorded = [
                request for request in requests if job_service.record_stop(session, request, now)
            ]
        for request in recorded:
            self._active[request.attempt_id].stop_reason = request.reason
        for request in requests:
            self._send_stop(self._active[request.attempt_id])

    def _send_stop(self, active: ActiveAttempt) -> None:
        self.executor.stop(active.handle, active.grace)
        active.stop_sent = True

    def note_checkpoints(self) -> None:
        """Store the newest checkpoint time of running attempts (a look every few seconds)."""
        running = [a.watched() for a in self._active.values() if a.observed == Observed.RUNNING]
        seen = self.checkpoints.look(running)
        if seen:
            with self.db.session() as session:
                self.checkpoints.record(session, seen, self.clock.now())
            self.checkpoints.mark(seen)

    # -- (3) schedule and (4) dispatch -------------------------------------------------------

    def schedule_and_dispatch(self) -> None:
        """One cycle; what it decides is started in parts as it goes (``Policy.max_starts``
        jobs at a time). It explains the jobs left pending when ``explain_interval_seconds``
        have passed since the last cycle that did."""
        with self.db.reader() as session:
            snapshot = self.snapshots.build(session, self.clock.now(), self.nominations)
        isolation = self.executor.isolation()
        if isolation is not None and not isolation.runs_jobs:
            self._hold(snapshot.pending, isolation)
            return
        due = time.monotonic() - self._explained_at >= self.settings.explain_interval_seconds
        if not due:
            snapshot = replace(snapshot, explain=False)
        decisions = self.decide(snapshot, self.clock, self._carry_out)
        self.nominations = dict(decisions.nominations)
        if due:
            self._explained_at = time.monotonic()
            self.pending_reasons = decisions.pending
            self._record_reasons(decisions.pending)
        self._carry_out(decisions)

    def _hold(self, pending, isolation: IsolationStatus) -> None:  # noqa: ANN001
        """Isolation is on and cannot be had: no job starts, and each says why."""
        reasons = {
            job.job_id: PendingReason(
                job.job_id, Reason.ISOLATION_UNAVAILABLE, isolation.message, position
            )
            for position, job in enumerate(pending, start=1)
        }
        self.pending_reasons = reasons
        self._record_reasons(reasons)

    def _carry_out(self, decisions: Decisions) -> None:
        """Stop the preempted jobs and start the placed ones (all or part of a cycle's)."""
        if decisions.preemptions:
            self._preempt(decisions.preemptions)
        if decisions.placements:
            self._dispatch(decisions.placements)

    def _preempt(self, preemptions: list[Preemption]) -> None:
        """(4) Stop each preempted job's attempts; they are requeued when they end."""
        by_job: dict[int, list[ActiveAttempt]] = {}
        for active in self._active.values():
            by_job.setdefault(active.job_id, []).append(active)
        requests = [
            job_service.preempted(active.attempt_id, preemption)
            for preemption in preemptions
            for active in by_job.get(preemption.job_id, ())
            if not active.stop_sent
        ]
        self._stop(requests)

    def _record_reasons(self, reasons: dict[int, PendingReason]) -> None:
        """Write a pending job's reason only when it changes (positions stay in memory).

        One transaction and two bulk statements per pass, however many jobs changed.
        """
        changed = {
            job_id: r
            for job_id, r in reasons.items()
            if self._last_codes.get(job_id) != (r.code.value, r.message)
        }
        for job_id in self._last_codes.keys() - reasons.keys():
            del self._last_codes[job_id]
        if not changed:
            return
        with self.db.session() as session:
            still = set(
                session.scalars(
                    select(JobModel.id).where(
                        JobModel.id.in_(changed), JobModel.status == JobStatus.PENDING.value
                    )
                )
            )
            self._write_reasons(session, {k: v for k, v in changed.items() if k in still})
        for job_id, reason in changed.items():
            self._last_codes[job_id] = (reason.code.value, reason.message)

    def _write_reasons(self, session, reasons: dict[int, PendingReason]) -> None:  # noqa: ANN001
        if not reasons:
            return
        jobs = JobModel.__table__
        session.execute(
            jobs.update()
            .where(jobs.c.id == bindparam("job"))
            .values(reason=bindparam("code"), message=bindparam("text")),
            [{"job": k, "code": r.code.value, "text": r.message} for k, r in reasons.items()],
        )
        now = self.clock.now()
        new_codes = [
            {"job_id": k, "at": now, "reason": r.code.value, "message": r.message}
            for k, r in reasons.items()
            if self._last_codes.get(k, ("",))[0] != r.code.value
        ]
        if new_codes:
            session.execute(insert(EventModel), new_codes)

    def _dispatch(self, placements: list[Placement]) -> None:
        """Record every attempt durably in one transaction, then launch them (at most once).

        The launch itself is recorded with the attempt's next transition; a crash before that
        is covered by ``Executor.recover`` when the server starts again.
        """
        failed = []
        fabrics: list[tuple[int, str | None]] = []
        claimed_all = self._claim(placements)
        for claimed, launched in self._launch_all(claimed_all):
            task = claimed.task
            if isinstance(launched, LaunchError):
                log.warning("launch of job %s failed: %s", task.job_id, launched)
                failed.append((claimed.attempt_id, task, launched))
                continue
            handle = launched
            self._active[claimed.attempt_id] = ActiveAttempt(
                claimed.attempt_id,
                task.job_id,
                task.attempt,
                handle,
                grace=task.stop_grace_seconds,
                max_runtime=claimed.max_runtime,
            )
            fabrics += [(task.job_id, t.get("fabric")) for t in handle.state.get("gang", [])]
        self.stats.started("launched", len(claimed_all) - len(failed))
        self.stats.started("launch_failed", len(failed))
        if failed:
            self._launch_failed(failed)
        if [said for _, said in fabrics if said]:
            self._record_fabrics(fabrics)

    def _launch_all(self, claimed: list[Claimed]) -> list[tuple[Claimed, Handle | LaunchError]]:
        """Launch each claimed attempt: one after the other on this machine (its fork server
        takes one at a time), side by side on a pool, where each launch waits for a node's
        agent to answer and nodes answer at once."""
        if len(claimed) < 2 or not self.executor.capabilities.multi_node:
            return [(one, self._launch(one)) for one in claimed]
        with ThreadPoolExecutor(max_workers=PARALLEL_LAUNCHES) as pool:
            return list(zip(claimed, pool.map(self._launch, claimed), strict=True))

    def _launch(self, claimed: Claimed) -> Handle | LaunchError:
        try:
            if claimed.gang:
                return self.executor.start_gang(claimed.tasks)
            return self.executor.start(claimed.task)
        except LaunchError as error:
            return error

    def _record_fabrics(self, fabrics: list[tuple[int, str | None]]) -> None:
        """What each task of a job over several nodes talks over (RDMA devices, or TCP at
        which speed): in the job's events, so that a slow fabric is never a surprise."""
        now = self.clock.now()
        with self.db.session() as session:
            for job_id, said in fabrics:
                if said:
                    job_service.record(session, job_id, now, Reason.FABRIC, said)

    def _claim(self, placements: list[Placement]) -> list[Claimed]:
        now = self.clock.now()
        claimed = []
        gangs: dict[int, list[Placement]] = {}
        for placement in placements:  # a job over several nodes: one placement per task
            gangs.setdefault(placement.job_id, []).append(placement)
        with self.db.session() as session:
            for group in gangs.values():
                placement = group[0]
                row = session.execute(
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
                        placement=gang_json(group),
                        reason=Reason.PLACED.value,
                        message=f"placed on {describe_all(group)}",
                    )
                    .returning(
                        JobModel.attempts,
                        JobModel.spec,
                        JobModel.user_id,
                        JobModel.array_id,
                        JobModel.array_index,
                    )
                ).first()
                if row is not None:
                    claimed.append(self._new_attempt(session, group, row, now))
        return claimed

    def _new_attempt(self, session, group: list[Placement], row, now: float) -> Claimed:  # noqa: ANN001
        number, data, user_id, array_id, array_index = row
        spec, placement = JobSpec.stored(data), group[0]
        attempt = AttemptModel(
            job_id=placement.job_id,
            number=number,
            node=placement.node,
            placement=gang_json(group),
            status="starting",
            created_at=now,
        )
        session.add(attempt)
        session.flush()
        job_service.record(
            session, placement.job_id, now, Reason.PLACED, f"placed on {describe_all(group)}"
        )
        user, unix_user = session.execute(
            select(UserModel.name, UserModel.unix_user).where(UserModel.id == user_id)
        ).one()
        wanted = spec.is_gang or spec.listen
        addresses = node_addresses(session, [p.node for p in group]) if wanted else {}
        tasks = []
        for index, part in enumerate(group):
            task = replace(
                self._task(part.job_id, number, spec, part), user=user, unix_user=unix_user
            )
            if spec.listen:  # where it serves: the address its node is reached at
                task = replace(task, node_address=addresses.get(part.node) or "127.0.0.1")
            if spec.is_gang:
                task = replace(
                    task,
                    task_index=index,
                    task_count=len(group),
                    node_address=addresses.get(part.node) or "127.0.0.1",
                    gpu_indices=tuple(range(len(part.gpus))),
                    launcher=spec.launcher,
                    launcher_mode=spec.launcher_mode,
                )
            if array_id is not None:  # an array's task: which one (gpupool's names, not the job's)
                size = session.get(JobArrayModel, array_id).size
                env = {**task.env, **job_service.array_env(array_id, array_index, size)}
                task = replace(task, env=env)
            if spec.listen:  # a notebook's or replica's token: told to it, never in its spec
                task = replace(task, env={**task.env, **secret_env(session, part.job_id)})
            tasks.append(task)
        return Claimed(attempt.id, tasks, spec.max_runtime_seconds)

    def _task(self, job_id: int, number: int, spec: JobSpec, placement: Placement) -> TaskSpec:
        return TaskSpec(
            job_id=job_id,
            attempt=number,
            node=placement.node,
            command=spec.command,
            env=spec.env,
            workdir=spec.workdir,
            gpu_uuids=[gpu.uuid for gpu in placement.gpus],
            log_limit_bytes=self.settings.log_limit_bytes,
            stop_grace_seconds=self._grace(spec),
            cpus=spec.resources.cpus,
            memory_bytes=spec.resources.memory_bytes,
            pids=spec.resources.pids,
            gpu_grants=tuple(GpuGrant(g.uuid, g.share, g.memory_bytes) for g in placement.gpus),
            code=spec.code,
            code_archive=str(archive_path(self.settings, spec.code)) if spec.code else None,
            listen=spec.listen,
            network=spec.network_mode,
            workspace=spec.workspace,
            model=spec.model,
            model_archive=str(model_archive(self.settings.models_dir, spec.model))
            if spec.model
            else None,
        )

    def _grace(self, spec: JobSpec) -> float:
        """The job's own grace period, else the server's."""
        if spec.grace_period_seconds is not None:
            return spec.grace_period_seconds
        return self.settings.stop_grace_seconds

    def _launch_failed(self, failed: list[tuple[int, TaskSpec, LaunchError]]) -> None:
        """Record failed launches; kept and tried again by the next pass if that fails."""
        self._failed_launches += failed
        self._record_failed_launches()

    def _record_failed_launches(self) -> None:
        if not self._failed_launches:
            return
        now = self.clock.now()
        with self.db.session() as session:
            for attempt_id, task, error in self._failed_launches:
                attempt = session.get(AttemptModel, attempt_id)
                attempt.status, attempt.ended_at = "launch_failed", now
                job = session.get(JobModel, task.job_id)
                if error.reason in REQUEUED_LAUNCHES:  # the job did nothing wrong: it waits
                    job_service.requeue(session, job, now, error.user_message)
                    continue
                job_service.finish(
                    session, job, JobStatus.FAILED, now, Reason.LAUNCH_FAILED, error.user_message
                )
        self._failed_launches = []


def _outcome(job_status: str) -> str:
    """How an attempt ended, for /metrics: its job's status, or ``requeued``."""
    final = JobStatus(job_status).is_final
    return job_status if final else "requeued"


def secret_env(session, job_id: int) -> dict[str, str]:  # noqa: ANN001
    """What a workload is told that its job's spec never holds (the spec is shown to the
    job's team): the token a notebook's JupyterLab, or a deployment's replica, is started
    with."""
    token = session.scalar(select(NotebookModel.token).where(NotebookModel.job_id == job_id))
    if token:
        return notebook_token_env(token)
    replica = session.scalar(
        select(DeploymentReplicaModel.token).where(DeploymentReplicaModel.job_id == job_id)
    )
    return {REPLICA_TOKEN_ENV: replica} if replica else {}


def describe_all(placements: list[Placement]) -> str:
    """'n1: GPU-a; n2: GPU-b' for a job over several nodes."""
    return "; ".join(describe(placement) for placement in placements)


def describe(placement: Placement) -> str:
    if not placement.gpus:
        return f"{placement.node} (no GPU)"
    parts = [g.uuid if g.share >= 1 else f"{g.uuid} ({g.share:g} of it)" for g in placement.gpus]
    return f"{placement.node}: " + ", ".join(parts)
