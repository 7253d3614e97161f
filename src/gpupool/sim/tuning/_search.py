"""``tune``: search the scheduler's knobs by replaying a window of history, then check the
best few on a later hold-out against the base before anything is adopted.

1. The hold-out under the base: its scores, and the replay's fidelity where the history
   gives observed JCTs; a median error above ``FIDELITY_LIMIT`` refuses the tuning, and
   so do fewer than ``MIN_FINISHED`` finished jobs in the window or the hold-out.
2. The search window under the base (trial 0), then ``trials`` settings from Optuna's TPE
   (asked ``TPE_BATCH`` at a time, whatever the workers, so that any number of workers gives
   the same trials) or from the grid; replays run in ``workers`` processes.
3. The ``RESCORED`` best of the window, replayed on the hold-out: a setting is adopted when
   it lowers the hold-out's objective by ``ADOPT_MIN`` or more and raises no guarded figure
   by more than its limit; else the base is kept, and the report says why.

Pure: a trace and a pool in, a report out; no database, no API, nothing kept between calls.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing import get_context

from gpupool.domain.policy import Policy
from gpupool.errors import InvalidTuning
from gpupool.scheduler.types import NodeCapacity, TeamQuota
from gpupool.sim.engine import PLACEMENT_MODES
from gpupool.sim.traces import Trace, TraceJob
from gpupool.sim.tuning._replay import (
    ReplayTask,
    Setup,
    fidelity_of,
    replay,
    run_task,
    score,
    service_before,
    window_jobs,
)
from gpupool.sim.tuning._report import (
    Fidelity,
    Knobs,
    Rescored,
    Scores,
    Trial,
    TuneReport,
)
from gpupool.sim.tuning._space import (
    apply_knobs,
    describe,
    grid,
    grid_sample,
    has_many_users,
    knobs_of,
    point_key,
    suggest,
)

OBJECTIVES = ("avg_jct", "median_jct", "p95_jct", "avg_wait")
GUARDED = ("p95_wait", "worst_team_slowdown")
DEFAULT_GUARDS: Mapping[str, float] = {"p95_wait": 0.10, "worst_team_slowdown": 0.10}
SAMPLERS = ("tpe", "grid")
ADOPT_MIN = 0.05  # the hold-out's objective must fall by 5 % at least
RESCORED = 3  # the best of the window replayed on the hold-out
# finished jobs the window and the hold-out each need: fewer say nothing a search could
# trust (dozens of settings ranked on a handful of jobs fit those jobs, not the site)
MIN_FINISHED = 20
TPE_BATCH = 4  # settings asked of TPE before it is told their scores
# a relative change of a figure is taken against at least this (a p95 wait of 0 s would
# make any wait an infinite change)
FLOORS = {"p95_wait": 60.0, "worst_team_slowdown": 1.0}

Map = Callable[[list[ReplayTask]], list[Scores]]


def tune(
    trace: Trace | Sequence[TraceJob],
    nodes: Sequence[NodeCapacity],
    *,
    base: Policy,
    window: tuple[float, float],
    holdout: tuple[float, float],
    trials: int = 60,
    objective: str = "avg_jct",
    guards: Mapping[str, float] | None = None,
    sampler: str = "tpe",
    workers: int = 1,
    seed: int = 0,
    quotas: Sequence[TeamQuota] = (),
    placement: str = "node",
    restart_cost: float = 60.0,
) -> TuneReport:
    """Choose the scheduler's settings for ``nodes`` from the history in ``trace``.

    ``window`` and ``holdout``: [start, end) in the trace's seconds (the hold-out is the
    later); ``base``: the settings in force; ``guards``: a figure of ``GUARDED`` -> the
    most it may rise against the base on the hold-out (0.1: 10 %), None for
    ``DEFAULT_GUARDS``; ``quotas``, ``placement``, ``restart_cost``: the replay's
    (``gpupool.sim.engine.simulate``). Deterministic for a ``seed``, whatever ``workers``.
    Raises ``InvalidTuning`` for an option it cannot run with; a history it cannot tune on
    gives a report whose decision is "refuse".
    """
    limits = _validated(trials, objective, guards, sampler, workers, window, holdout, placement)
    began = time.perf_counter()
    setup = Setup(tuple(nodes), tuple(quotas), placement, restart_cost)
    with _replays(workers) as run:
        search = _Search(trace, setup, base, objective, limits, run)
        report = search.run(window, holdout, sampler, trials, seed)
    return replace(report, seconds=round(time.perf_counter() - began, 3))


def _validated(
    trials: int,
    objective: str,
    guards: Mapping[str, float] | None,
    sampler: str,
    workers: int,
    window: tuple[float, float],
    holdout: tuple[float, float],
    placement: str,
) -> dict[str, float]:
    """The guards' limits; InvalidTuning naming the first option that cannot be."""
    limits = dict(DEFAULT_GUARDS if guards is None else guards)
    problems = [
        (objective not in OBJECTIVES, f"objective '{objective}': use {', '.join(OBJECTIVES)}"),
        (sampler not in SAMPLERS, f"sampler '{sampler}': use {' or '.join(SAMPLERS)}"),
        (trials < 1, f"trials {trials}: at least 1"),
        (workers < 1, f"workers {workers}: at least 1"),
        (placement not in PLACEMENT_MODES, f"placement '{placement}': node or count"),
        (not window[0] < window[1], f"window {window}: its start before its end"),
        (not holdout[0] < holdout[1], f"holdout {holdout}: its start before its end"),
    ]
    for name, limit in limits.items():
        problems.append((name not in GUARDED, f"guard '{name}': use {', '.join(GUARDED)}"))
        problems.append((not limit >= 0, f"guard {name}={limit}: a share of 0 or more"))
    for wrong, message in problems:
        if wrong:
            raise InvalidTuning(f"cannot tune with {message}", field=message.split(" ")[0])
    return limits


@contextmanager
def _replays(workers: int) -> Iterator[Map]:
    """A function that runs replays in order: in this process, or in ``workers`` processes
    (spawned, so that a server's threads and open files do not follow into them)."""
    if workers == 1:
        yield lambda tasks: [run_task(task) for task in tasks]
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        yield lambda tasks: list(pool.map(run_task, tasks))


@dataclass
class _Outcome:
    """What the hold-out under the base gave (or why there is nothing to tune on)."""

    scores: Scores | None
    fidelity: Fidelity | None
    refusal: str | None


class _Search:
    """One call of ``tune``: its history, its replays so far, its trials."""

    def __init__(
        self,
        trace: Trace | Sequence[TraceJob],
        setup: Setup,
        base: Policy,
        objective: str,
        limits: dict[str, float],
        run: Map,
    ) -> None:
        self.trace = trace
        self.setup = setup
        self.base = base
        self.objective = objective
        self.limits = limits
        self.map = run
        self.replays = 0
        self.scored: dict[str, Scores] = {}  # window scores by point (``point_key``)
        self.jobs: tuple[TraceJob, ...] = ()
        self.history: tuple[float, ...] = ()
        self.multi_user = False

    def run(
        self,
        window: tuple[float, float],
        holdout: tuple[float, float],
        sampler: str,
        trials: int,
        seed: int,
    ) -> TuneReport:
        self.jobs = window_jobs(self.trace, *window)
        self.history = service_before(self.trace, window[0])
        held = window_jobs(self.trace, *holdout)
        self.multi_user = has_many_users(self.jobs + held)
        base_knobs = knobs_of(self.base, self.multi_user)
        outcome = self.check_holdout(held, holdout[0])
        report = TuneReport(
            objective=self.objective,
            decision="refuse",
            reason=outcome.refusal or "",
            chosen=None,
            predicted=None,
            base=base_knobs,
            base_holdout=outcome.scores,
            trials=[],
            rescored=[],
            fidelity=outcome.fidelity,
            space=describe(sampler, self.multi_user),
            window=window,
            holdout=holdout,
            jobs=_counts(self.jobs, held),
            guards=self.limits,
        )
        if outcome.refusal is not None or outcome.scores is None:
            return replace(report, replays=self.replays)
        tried = self.search(base_knobs, sampler, trials, seed)
        rescored = self.rescore(tried, held, holdout[0], outcome.scores)
        decision, reason, chosen = self.choose(rescored)
        predicted = chosen.holdout if chosen is not None else outcome.scores
        return replace(
            report,
            decision=decision,
            reason=reason,
            chosen=chosen.knobs if chosen is not None else None,
            predicted=predicted.objective(self.objective),
            trials=tried,
            rescored=rescored,
            replays=self.replays,
        )

    # -- 1. the hold-out under the base ------------------------------------------------------

    def check_holdout(self, held: tuple[TraceJob, ...], start: float) -> _Outcome:
        finished = (sum(not job.censored for job in jobs) for jobs in (self.jobs, held))
        searched, kept = finished
        if min(searched, kept) < MIN_FINISHED:
            refusal = (
                f"nothing to tune on: the window has {searched} finished jobs and the "
                f"hold-out {kept}, {MIN_FINISHED} each at least; widen them"
            )
            return _Outcome(None, None, refusal)
        task = ReplayTask(held, self.base, self.setup, service_before(self.trace, start))
        result = replay(task)
        self.replays += 1
        found = None
        if any(job.observed_jct is not None for job in held):
            found = fidelity_of(result.records, held)
        refusal = None
        if found is not None and not found.trusted:
            refusal = (
                f"the replay does not reproduce the hold-out: median JCT error "
                f"{_percent(found.median_error)} over {found.jobs} jobs (limit "
                f"{_percent(found.limit)}); check the pool's nodes and the history first"
            )
        return _Outcome(score(result, held), found, refusal)

    # -- 2. the search -------------------------------------------------------------------------

    def search(self, base_knobs: Knobs, sampler: str, trials: int, seed: int) -> list[Trial]:
        tried = [Trial(0, base_knobs, self.window_scores([base_knobs])[0])]
        if sampler == "grid":
            points = grid_sample(grid(self.multi_user), trials, seed)
            points = [{**point, "packing": self.base.packing} for point in points]
            for number, (knobs, scores) in enumerate(
                zip(points, self.window_scores(points), strict=True), start=1
            ):
                tried.append(Trial(number, knobs, scores))
            return tried
        return tried + self.tpe(trials, seed, tried[0].window)

    def tpe(self, trials: int, seed: int, base: Scores) -> list[Trial]:
        import optuna  # numpy and optuna load only when TPE is asked for (about a second)

        optuna.logging.set_verbosity(logging.WARNING)  # not a line per trial
        sampler = optuna.samplers.TPESampler(seed=seed)
        study = optuna.create_study(direction="minimize", sampler=sampler)
        tried: list[Trial] = []
        while len(tried) < trials:
            asked = [study.ask() for _ in range(min(TPE_BATCH, trials - len(tried)))]
            points = [suggest(trial, self.base, self.multi_user) for trial in asked]
            for trial, knobs, scores in zip(asked, points, self.window_scores(points), strict=True):
                study.tell(trial, self.value(scores, base))
                tried.append(Trial(len(tried) + 1, knobs, scores))
        return tried

    def window_scores(self, points: list[Knobs]) -> list[Scores]:
        """The window's scores of each point, each distinct point replayed once."""
        keys = [point_key(knobs) for knobs in points]
        fresh: dict[str, Knobs] = {}
        for key, knobs in zip(keys, points, strict=True):
            if key not in self.scored:
                fresh.setdefault(key, knobs)
        tasks = [self.task(self.jobs, knobs, self.history) for knobs in fresh.values()]
        for key, scores in zip(fresh, self.map(tasks), strict=True):
            self.scored[key] = scores
        self.replays += len(tasks)
        return [self.scored[key] for key in keys]

    def task(self, jobs: tuple[TraceJob, ...], knobs: Knobs, history: tuple) -> ReplayTask:
        return ReplayTask(jobs, apply_knobs(self.base, knobs), self.setup, history)

    def value(self, scores: Scores, base: Scores) -> float:
        """The objective of a trial: infinite when it leaves more jobs never started."""
        if scores.unscheduled > base.unscheduled:
            return math.inf
        return scores.objective(self.objective)

    # -- 3. the best few on the hold-out, and the choice ---------------------------------------

    def rescore(
        self, tried: list[Trial], held: tuple[TraceJob, ...], start: float, base: Scores
    ) -> list[Rescored]:
        best: dict[str, Trial] = {}
        window_base = tried[0].window
        ranked = sorted(tried[1:], key=lambda t: (self.value(t.window, window_base), t.number))
        for trial in ranked:
            key = point_key(trial.knobs)
            if math.isfinite(self.value(trial.window, window_base)) and key != point_key(
                tried[0].knobs
            ):
                best.setdefault(key, trial)
            if len(best) == RESCORED:
                break
        history = service_before(self.trace, start)
        tasks = [self.task(held, trial.knobs, history) for trial in best.values()]
        self.replays += len(tasks)
        return [
            self.compared(trial, scores, base)
            for trial, scores in zip(best.values(), self.map(tasks), strict=True)
        ]

    def compared(self, trial: Trial, scores: Scores, base: Scores) -> Rescored:
        improvement = _drop(base.objective(self.objective), scores.objective(self.objective))
        changes = {
            name: _change(base.objective(name), scores.objective(name), FLOORS[name])
            for name in GUARDED
        }
        broken = [name for name, limit in self.limits.items() if changes[name] > limit]
        return Rescored(trial.number, trial.knobs, scores, improvement, changes, broken)

    def choose(self, rescored: list[Rescored]) -> tuple[str, str, Rescored | None]:
        """("adopt" | "keep", why, the setting adopted)."""
        if not rescored:
            return "keep", "no setting tried differs from the base and ran every job", None
        fit = [r for r in rescored if r.improvement >= ADOPT_MIN and not r.broken]
        if fit:
            chosen = max(fit, key=lambda r: (r.improvement, -r.number))
            why = (
                f"trial {chosen.number} lowers the hold-out's {self.objective} by "
                f"{_percent(chosen.improvement)} (at least {_percent(ADOPT_MIN)} needed) and "
                f"breaks no guard ({self._guards_text(chosen)})"
            )
            return "adopt", why, chosen
        return "keep", self._kept_because(rescored), None

    def _kept_because(self, rescored: list[Rescored]) -> str:
        best = max(rescored, key=lambda r: (r.improvement, -r.number))
        text = (
            f"the best on the hold-out, trial {best.number}, lowers its {self.objective} by "
            f"{_percent(best.improvement)}"
        )
        if best.improvement < ADOPT_MIN:
            return f"{text}: under the {_percent(ADOPT_MIN)} needed"
        broken = ", ".join(
            f"{name} {_signed(best.guards[name])} (limit {_percent(self.limits[name])})"
            for name in best.broken
        )
        return f"{text} but breaks a guard: {broken}"

    def _guards_text(self, rescored: Rescored) -> str:
        return ", ".join(f"{name} {_signed(value)}" for name, value in rescored.guards.items())


def _counts(window: tuple[TraceJob, ...], held: tuple[TraceJob, ...]) -> dict[str, int]:
    censored = sum(job.censored for job in window + held)
    return {"window": len(window), "holdout": len(held), "censored": censored}


def _drop(base: float, value: float) -> float:
    """How much lower ``value`` is than ``base``, as a share of ``base``."""
    return (base - value) / base if base > 0 else 0.0


def _change(base: float, value: float, floor: float) -> float:
    """How much higher ``value`` is than ``base``, as a share of ``base`` (at least
    ``floor``)."""
    return (value - base) / max(base, floor)


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f} %"


def _signed(share: float) -> str:
    return f"{100 * share:+.1f} %"
