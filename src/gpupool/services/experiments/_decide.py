"""One experiment's pass, decided in memory: its trials followed from their jobs, judged at
their rungs (or by Optuna's pruner), the experiment ended or given new trials (``decide``).

No database here: the pipeline (``_progress``) loads what this reads, and applies the
``Plan`` it returns in one guarded transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpupool.domain.experiments import ExperimentSpec, ExperimentStatus, TrialState
from gpupool.domain.jobs import JobStatus, Reason
from gpupool.services.experiments._rungs import Curve, Point, Verdict, judge

if TYPE_CHECKING:  # Optuna is imported when a study is first made (``_progress._rebuild``)
    from gpupool.services.experiments._studies import Study

ACTIVE_STATES = (TrialState.PENDING.value, TrialState.RUNNING.value)
# a job that succeeded waits this long at most for its last points to be read
INGEST_WAIT_SECONDS = 30.0
# samplers whose ask grows with the history (tpe: ~15-20 ms at 1,000 trials; cmaes): a pass
# asks at most this many, and the pipeline passes again at once for the rest, so that no
# pass (and no verdict due in it) waits behind a burst of asks
COSTLY_SAMPLERS = frozenset({"tpe", "cmaes"})
COSTLY_ASKS_PER_PASS = 1


@dataclass
class Live:
    """What the pipeline holds of one experiment between passes: its study, each trial's
    curve (time, objective) and last objective, the verdicts given, and how far its
    trials' metrics were read (``cursor``: the last ``job_metrics`` id)."""

    spec: ExperimentSpec
    study: Study
    curves: dict[int, list[Point]] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)
    verdicts: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    cursor: int = 0


@dataclass(frozen=True)
class TrialRow:
    """A trial as loaded, with its job's status."""

    number: int
    job_id: int | None
    state: str
    params: dict[str, Any]
    job_status: str | None
    job_reason: str | None
    job_message: str | None
    job_ended_at: float | None
    read_to_end: bool  # its job's last attempt's metrics were read to their end
    value: float | None = None  # its objective and time as recorded (written when they move)
    time: float | None = None


@dataclass
class Plan:
    """What a pass decided for one experiment, to apply in one transaction."""

    trials: dict[int, dict[str, Any]] = field(default_factory=dict)  # number -> new values
    stops: list[tuple[int, str]] = field(default_factory=list)  # (job id, why): stop early
    new: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (number, params)
    # job id -> its trial's standing at the rung it passed (for the scheduler's victims)
    standings: dict[int, float] = field(default_factory=dict)
    end: tuple[ExperimentStatus, str, str] | None = None
    best: tuple[int, float] | None = None
    more: bool = False  # room for trials left unasked this pass: pass again at once

    @property
    def changes(self) -> bool:
        return bool(self.trials or self.stops or self.new or self.end or self.standings)


def decide(
    live: Live, status: ExperimentStatus, made: int, rows: Sequence[TrialRow], now: float
) -> Plan:
    """The pass: follow, judge, end or grow (asking the study for new points)."""
    plan = Plan()
    states = {row.number: row.state for row in rows}
    for row in rows:
        if row.state in ACTIVE_STATES:
            _follow(live, row, plan, states, now)
    _judge(live, rows, plan, states)
    plan.best = best(live, states)
    _end_or_grow(live, status, made, plan, states)
    for number, update in plan.trials.items():  # the study hears how trials ended, and
        if TrialState(update.get("state", TrialState.RUNNING.value)).is_final:  # how far
            curve = live.curves.get(number, [])  # they got (as a rebuilt study would)
            live.study.tell(number, update["state"], live.last.get(number), curve)
    return plan


def best(live: Live, states: dict[int, str]) -> tuple[int, float] | None:
    """The completed trial with the best objective (the lower number on a tie)."""
    found: tuple[int, float] | None = None
    for number in sorted(states):
        value = live.last.get(number)
        if states[number] != TrialState.COMPLETED.value or value is None:
            continue
        if found is None or live.spec.objective.better(value, found[1]):
            found = (number, value)
    return found


def _follow(live: Live, row: TrialRow, plan: Plan, states: dict[int, str], now: float) -> None:
    """The trial's state from its job's: pending, running, or how it ended."""
    update: dict[str, Any] = {}
    curve = live.curves.get(row.number)
    if curve and curve[-1][0] != row.time:
        update["time"] = curve[-1][0]
    if live.last.get(row.number, row.value) != row.value:
        update["value"] = live.last[row.number]
    state, message = _state_of(live, row, now)
    if state != row.state:
        update["state"] = state
        if message is not None:
            update["message"] = message
        if TrialState(state).is_final:
            update["ended_at"] = now
    states[row.number] = state
    if update:
        plan.trials.setdefault(row.number, {}).update(update)


def _state_of(live: Live, row: TrialRow, now: float) -> tuple[str, str | None]:
    job = row.job_status
    if job in (None, JobStatus.PENDING.value):
        return TrialState.PENDING.value, None
    if job in (JobStatus.STARTING.value, JobStatus.RUNNING.value):
        return TrialState.RUNNING.value, None
    if job == JobStatus.SUCCEEDED.value:
        return _succeeded(live, row, now)
    if job == JobStatus.CANCELLED.value:
        early = row.job_reason == Reason.EARLY_STOPPED.value
        state = TrialState.EARLY_STOPPED if early else TrialState.CANCELLED
        return state.value, row.job_message
    return TrialState.FAILED.value, f"its job {job}: {row.job_message}"


def _succeeded(live: Live, row: TrialRow, now: float) -> tuple[str, str | None]:
    waited = now - (row.job_ended_at or now)
    if not row.read_to_end and waited < INGEST_WAIT_SECONDS:
        return TrialState.RUNNING.value, None  # its last points are still being read
    if _unjudged(live, row.number):
        return TrialState.RUNNING.value, "ended; waits for its rung verdicts"
    metric = live.spec.objective.metric
    if row.number not in live.last:
        return TrialState.FAILED.value, (
            f"its job ended without reporting {metric}: report it with "
            f"gpupool.metrics.log({metric}=...)"
        )
    return TrialState.COMPLETED.value, f"{metric} {live.last[row.number]:.6g}"


def _unjudged(live: Live, number: int) -> bool:
    """A rung it reached has no verdict yet (it waits for earlier trials): the trial is not
    complete until then, so that a verdict may still stop it."""
    if live.spec.stopping.name != "asha":
        return False
    points = live.curves.get(number, [])
    reached = [
        r for r, at in enumerate(live.spec.stopping.rungs()) if any(t >= at for t, _ in points)
    ]
    return any((number, r) not in live.verdicts for r in reached) and not any(
        not v.goes_on for (n, _), v in live.verdicts.items() if n == number
    )


def _judge(live: Live, rows: Sequence[TrialRow], plan: Plan, states: dict[int, str]) -> None:
    stopping = live.spec.stopping
    if stopping.name == "asha":
        _asha(live, rows, plan, states)
    elif stopping.name in ("median", "hyperband"):
        for row in rows:
            if states[row.number] in ACTIVE_STATES and _pruned(live, row):
                message = f"stopped by the {stopping.name} rule at {_where(live, row.number)}"
                _stop(live, row, plan, states, message, None)


def _asha(live: Live, rows: Sequence[TrialRow], plan: Plan, states: dict[int, str]) -> None:
    stopping = live.spec.stopping
    curves = [
        Curve(
            row.number,
            live.curves.get(row.number, []),
            ended=row.job_status in _ENDED or TrialState(states[row.number]).is_final,
        )
        for row in rows
    ]
    given = judge(
        curves, stopping.rungs(), stopping.reduction_factor, live.spec.objective, live.verdicts
    )
    by_number = {row.number: row for row in rows}
    for verdict in given:
        live.verdicts[(verdict.number, verdict.rung)] = verdict
        row = by_number[verdict.number]
        update = plan.trials.setdefault(verdict.number, {})
        update["rungs"] = _rungs_json(live, verdict.number)
        update["rung"] = verdict.rung
        message = verdict.message(stopping.time_metric)
        update["message"] = message
        if not verdict.goes_on:
            _stop(live, row, plan, states, message, verdict.rung)
        elif row.job_id is not None:
            plan.standings[row.job_id] = verdict.standing


def _stop(
    live: Live,
    row: TrialRow,
    plan: Plan,
    states: dict[int, str],
    message: str,
    rung: int | None,
) -> None:
    update = plan.trials.setdefault(row.number, {})
    update.update(state=TrialState.EARLY_STOPPED.value, message=message)
    states[row.number] = TrialState.EARLY_STOPPED.value
    if row.job_id is not None and row.job_status not in _ENDED:
        plan.stops.append((row.job_id, message))


def _end_or_grow(
    live: Live, status: ExperimentStatus, made: int, plan: Plan, states: dict[int, str]
) -> None:
    spec = live.spec
    active = sum(1 for s in states.values() if s in ACTIVE_STATES)
    failed = sum(1 for s in states.values() if s == TrialState.FAILED.value)
    metric = spec.objective.metric
    if plan.best is not None and spec.objective.reached(plan.best[1]):
        number, value = plan.best
        plan.end = (ExperimentStatus.SUCCEEDED, "GoalReached", f"trial {number} reached the "
                    f"goal: {metric} {value:.6g}")  # fmt: skip
    elif failed > spec.failures_allowed:
        plan.end = (
            ExperimentStatus.FAILED,
            "TooManyFailures",
            f"{failed} trials failed, more than max_failed ({spec.failures_allowed})",
        )
    elif made >= trial_budget(spec) and active == 0:
        said = f"; best: trial {plan.best[0]}, {metric} {plan.best[1]:.6g}" if plan.best else ""
        plan.end = (ExperimentStatus.SUCCEEDED, "MaxTrials", f"all {made} trials ended{said}")
    elif status is ExperimentStatus.RUNNING:
        room = max(0, min(spec.max_concurrent - active, trial_budget(spec) - made))
        asks = min(room, COSTLY_ASKS_PER_PASS) if spec.sampler.name in COSTLY_SAMPLERS else room
        for number in range(made + 1, made + 1 + asks):
            plan.new.append((number, live.study.ask(number)))
        plan.more = asks < room


def trial_budget(spec: ExperimentSpec) -> int:
    """max_trials, or fewer when a grid has fewer points."""
    if spec.sampler.name != "grid":
        return spec.max_trials
    points = 1
    for parameter in spec.parameters.values():
        points *= parameter.grid_size()
        if points >= spec.max_trials:
            return spec.max_trials
    return min(spec.max_trials, points)


_ENDED = {s.value for s in JobStatus if s.is_final}


def _pruned(live: Live, row: TrialRow) -> bool:
    return live.study.should_stop(row.number, live.curves.get(row.number, []))


def _where(live: Live, number: int) -> str:
    points = live.curves.get(number) or [(0.0, 0.0)]
    return f"{live.spec.stopping.time_metric} {points[-1][0]:g}"


def _rungs_json(live: Live, number: int) -> dict[str, list[float | int]]:
    return {
        str(rung): verdict.as_json()
        for (n, rung), verdict in sorted(live.verdicts.items())
        if n == number
    }
