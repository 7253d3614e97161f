"""Experiments (hyper-parameter search): issue 26's four aims, measured.

Aims 1-3 run through a real server (8 declared GPUs; its experiments pipeline, metric
ingest and scheduler as shipped), each search against its baseline on the same server in the
same run; aim 4 runs the pipeline's rules in-process (``experiment_passes.py``).

1. Digits: 60 trials of a small real model (``trials/digits.py``: scikit-learn's MLP on its
   bundled digits, ``val_error`` logged each epoch, up to 27 epochs), 8 at once, the random
   sampler with one seed: successive halving (ASHA: rungs at epochs 1, 3 and 9) against no
   stopping. Epochs run (each trial's last step logged, summed) and the best completed
   trial's validation error. Aim: ASHA <= 25 % of random search's epochs, best within 0.2
   points.
2. Synthetic learning curves (``trials/curves.py``: 0.1 s an epoch, up to 81, a seeded curve
   family per seed), 1 GPU a trial, 8 at once: the time from making the experiment to its
   end at the goal (a completed trial's loss at or below a target: the best 2 % of the
   family's points), ASHA (rungs 1, 3, 9, 27) against random search, the same points trial
   by trial. Aim: the median over seeds of ASHA's time / random's <= 1/3.
3. Preemption: aim 2's ASHA search (seed 1, no goal) run twice, the second time with a
   priority-100 job of 8 GPUs (1 s long) submitted every few seconds, which preempts the
   running trials (same team, lower priority); each trial saves its epoch in
   ``$GPUPOOL_CHECKPOINT_DIR`` and resumes after it. Compared: the trials (numbers and
   points), every rung verdict (the ``trials`` table's ``rungs``: trial, rung, value, rank,
   of, keep), the trials' end states, the best trial, and each trial's steps logged (1..N,
   none missing). The aim says every 30 s; the search lasts about 15 s, so the default is
   every 3 s (--preempt-every 30 for the aim's).
4. The pipeline's pass at 1,000 trials (p50/p95 of the whole pass and of its decision:
   judging and Optuna's asks), each sampler (--samplers) with the aim's verdict, and the
   rebuild of the experiment from the tables (the pipeline's state dropped, one pass).
   Aims: p95 < 50 ms, rebuild < 2 s. Each figure by the wall clock and, after "cpu", in
   the CPU time of the pass's thread (on a busy machine the wall clock's p95 is mostly
   waiting for a core).

    python benchmarks/experiments.py [--quick] [--aims 1,2,3,4] [--digits-trials 60]
        [--digits-epoch 0.2] [--seeds 3] [--target-share 0.02] [--preempt-trials 60]
        [--preempt-every 3] [--at 1000] [--passes 100] [--samplers random,tpe,cmaes,qmc,grid]

The default takes about 10 minutes on 2 cores (aim 4, its five samplers, about 4); --quick
about 2 (smaller sizes: its figures show the benchmark works, not the aims). The aims' full
sizes: --seeds 10.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from experiment_passes import Passes, measure
from harness import client, percentile, start_server, stop_on_sigterm, wait_until
from trials import curves

HERE = Path(__file__).resolve().parent
DIGITS = (HERE / "trials" / "digits.py").read_text()
CURVES = (HERE / "trials" / "curves.py").read_text()
ACTIVE = ("running", "paused")
DIGIT_EPOCHS, DIGIT_RUNGS = 27, (1, 3, 9)
CURVE_EPOCHS, CURVE_PACE = 81, 0.1
SEARCH_DEADLINE = 150.0  # seconds an aim-2 search may take before it counts as not reached
AIM_EPOCHS, AIM_POINTS, AIM_TIME, AIM_P95, AIM_REBUILD = 0.25, 0.2, 1 / 3, 0.050, 2.0


@dataclass(frozen=True)
class Sizes:
    digits_trials: int = 60
    digits_epoch: float = 0.2  # seconds an epoch takes at least (trials/digits.py says why)
    seeds: int = 3
    target_share: float = 0.02  # aim 2's target: the loss of the family's best 2 % of points
    preempt_trials: int = 60
    preempt_every: float = 3.0
    at: int = 1000
    passes: int = 100


QUICK = Sizes(digits_trials=16, seeds=1, target_share=0.1, preempt_trials=16, at=300, passes=40)


def main() -> None:
    args = _arguments()
    stop_on_sigterm()
    sizes = _sizes(args)
    aims = {int(a) for a in args.aims.split(",")}
    print(f"experiments benchmark ({'quick' if args.quick else 'default'} sizes: {sizes})")
    if aims & {1, 2, 3}:
        server = start_server()
        try:
            with client(server) as http:
                api = Api(http)
                if 1 in aims:
                    digits(api, sizes.digits_trials, sizes.digits_epoch)
                if 2 in aims:
                    time_to_target(api, sizes.seeds, sizes.target_share)
                if 3 in aims:
                    preemption(api, server.data_dir / "gpupool.db", sizes)
        finally:
            server.stop()
    if 4 in aims:
        passes(sizes.at, sizes.passes, args.samplers.split(","))


# -- 1. digits ---------------------------------------------------------------------------------


def digits(api: Api, trials: int, pace: float) -> None:
    print(
        f"1. digits: scikit-learn's MLP on its 1,797 bundled digits, {trials} trials of up to "
        f"{DIGIT_EPOCHS} epochs ({pace:g} s each), 8 at once, the random sampler (seed 1)"
    )
    runs = {}
    for stopping in ("none", "asha"):
        stops = _stopping(stopping, DIGIT_EPOCHS)
        body = _digits_body(f"digits-{stopping}", trials, stops, pace)
        shown = api.run(body)
        runs[stopping] = (shown, api.epochs(shown, "val_error"))
        _say_digits(stopping, shown, runs[stopping][1])
    (plain, plain_epochs), (asha, asha_epochs) = runs["none"], runs["asha"]
    past = _past_verdicts(asha, asha_epochs, DIGIT_RUNGS)
    _say_lag(api, asha, past)
    share = sum(asha_epochs.values()) / sum(plain_epochs.values())
    decided = (sum(asha_epochs.values()) - past) / sum(plain_epochs.values())
    worse = 100 * (asha["best"]["value"] - plain["best"]["value"])
    print(
        f"   ASHA's epochs / random search's: {share:.1%} (aim <= {AIM_EPOCHS:.0%}: "
        f"{_met(share <= AIM_EPOCHS)}; {decided:.1%} without those run after a stop was "
        f"decided); best val_error {worse:+.2f} points (aim <= {AIM_POINTS:g}: "
        f"{_met(worse <= AIM_POINTS)})"
    )


def _digits_body(name: str, trials: int, stopping: dict[str, Any], pace: float) -> dict[str, Any]:
    return {
        "name": name,
        "objective": {"metric": "val_error", "direction": "minimize"},
        "parameters": {
            "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
            "alpha": {"type": "float", "low": 1e-6, "high": 1e-1, "log": True},
            "hidden": {"type": "int", "low": 8, "high": 128, "log": True},
            "batch": {"type": "categorical", "choices": [32, 64, 128, 256]},
        },
        "sampler": {"name": "random", "seed": 1},
        "stopping": stopping,
        "max_trials": trials,
        "max_concurrent": 8,
        "trial": _trial(DIGITS, {"MAX_TIME": str(DIGIT_EPOCHS), "EPOCH_SECONDS": str(pace)}),
    }


def _say_digits(stopping: str, shown: dict[str, Any], epochs: dict[int, int]) -> None:
    best = shown["best"]
    label = "random search" if stopping == "none" else "ASHA (rungs 1, 3, 9)"
    print(
        f"   {label:<21} {sum(epochs.values()):5d} epochs in {_took(shown):5.1f} s, best "
        f"val_error {100 * best['value']:.2f} % (trial {best['trial']}: {_point(best['params'])})"
    )


def _say_lag(api: Api, shown: dict[str, Any], past: int) -> None:
    """The epochs run after a stop was decided (``past``), and where they come from: the
    time from a stopped trial's point at its rung to the verdict (its EarlyStopped event),
    and from the verdict to its job's end."""
    judged, stopped = [], []
    for trial in shown["trial_list"]:
        if trial["state"] != "early_stopped" or trial["rung"] is None:
            continue
        times = {}
        for one in api.series(trial["job_id"], "val_error"):
            times.update(zip(one["steps"], one["times"], strict=True))
        events = api.get(f"/jobs/{trial['job_id']}/events")
        verdict = min((e["at"] for e in events if e["reason"] == "EarlyStopped"), default=None)
        at = times.get(DIGIT_RUNGS[trial["rung"]])
        if verdict is None or at is None:
            continue  # it ended before its verdict
        judged.append(verdict - at)
        stopped.append(api.job(trial["job_id"])["ended_at"] - verdict)
    print(
        f"   ASHA's stopped trials ran {past} epochs after their stop was decided: "
        f"{len(judged)} stopped while running, median from the point at the rung to the "
        f"verdict {_median(judged):.2f} s, from the verdict to the trial's end "
        f"{_median(stopped):.2f} s"
    )


def _past_verdicts(shown: dict[str, Any], epochs: dict[int, int], rungs: tuple[int, ...]) -> int:
    """Epochs the stopped trials ran past the rung they were stopped at."""
    return sum(
        epochs[t["number"]] - rungs[t["rung"]]
        for t in shown["trial_list"]
        if t["state"] == "early_stopped" and t["rung"] is not None
    )


# -- 2. time to a target -------------------------------------------------------------------


def time_to_target(api: Api, seeds: int, share: float) -> None:
    print(
        f"2. synthetic curves: up to {CURVE_EPOCHS} epochs of {CURVE_PACE:g} s, 1 GPU a trial, "
        f"8 at once; time from making the search to a completed trial in the best "
        f"{share:.0%} of the family's points ({seeds} seeds, the random sampler seeded alike)"
    )
    ratios = []
    for seed in range(1, seeds + 1):
        target = _target(seed, share)
        found = {s: _search(api, seed, s, target) for s in ("none", "asha")}
        (plain, plain_said), (asha, asha_said) = found["none"], found["asha"]
        ratio = _ratio(asha, plain)
        ratios.append(ratio)
        print(
            f"   seed {seed}: target loss {target:.4f}; random search {_secs(plain)} "
            f"({plain_said}), ASHA {_secs(asha)} ({asha_said}): ASHA / random {ratio:.2f}"
        )
    median = statistics.median(ratios)
    print(f"   median ASHA / random: {median:.2f} (aim <= 0.33: {_met(median <= AIM_TIME)})")


def _target(seed: int, share: float) -> float:
    """The loss of the best ``share`` of the family's points, drawn as the random sampler
    draws them."""
    chance = random.Random(seed * 7919)
    finals = sorted(
        curves.loss(curves.random_point(chance), CURVE_EPOCHS, seed) for _ in range(20_000)
    )
    return finals[int(share * len(finals))]


def _search(api: Api, seed: int, stopping: str, target: float) -> tuple[float | None, str]:
    """(seconds to the goal, None if not reached in time; which trial reached it, of how
    many made)."""
    body = curves_body(f"curves-{seed}-{stopping}", seed, stopping, 1000, target)
    shown = api.run(body, SEARCH_DEADLINE)
    made = len(shown["trial_list"])
    if shown["reason"] != "GoalReached":
        return None, f"{made} trials made"
    return _took(shown), f"trial {shown['best']['trial']} of {made} made"


def _ratio(asha: float | None, plain: float | None) -> float:
    """ASHA's time / random search's; a search that did not reach the target counts as
    taking SEARCH_DEADLINE (a bound: the true ratio is lower, or higher, than shown)."""
    return (asha or SEARCH_DEADLINE) / (plain or SEARCH_DEADLINE)


def curves_body(
    name: str, seed: int, stopping: str, trials: int, goal: float | None
) -> dict[str, Any]:
    env = {"FAMILY": str(seed), "MAX_TIME": str(CURVE_EPOCHS), "EPOCH_SECONDS": str(CURVE_PACE)}
    return {
        "name": name,
        "objective": {"metric": "loss", "direction": "minimize", "goal": goal},
        "parameters": {
            "x": {"type": "float", "low": 0.0, "high": 1.0},
            "y": {"type": "float", "low": 0.0, "high": 1.0},
            "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
        },
        "sampler": {"name": "random", "seed": seed},
        "stopping": _stopping(stopping, CURVE_EPOCHS),
        "max_trials": trials,
        "max_concurrent": 8,
        "trial": _trial(CURVES, env),
    }


# -- 3. preemption -----------------------------------------------------------------------------


def preemption(api: Api, database: Path, sizes: Sizes) -> None:
    every, trials = sizes.preempt_every, sizes.preempt_trials
    print(
        f"3. preemption: aim 2's ASHA search (seed 1, no goal), {trials} trials, 8 at once, "
        f"then again with a priority-100 job of 8 GPUs (1 s) every {every:g} s"
    )
    calm = api.run(curves_body("calm", 1, "asha", trials, None))
    storm = Preemptor(api, every)
    stormy = api.run(curves_body("stormy", 1, "asha", trials, None), during=storm.tick)
    jobs = [api.job(t["job_id"]) for t in stormy["trial_list"]]
    preempted = [job for job in jobs if job["preemptions"]]
    print(
        f"   unpreempted: {_took(calm):.1f} s; preempted: {_took(stormy):.1f} s, "
        f"{storm.submitted} urgent jobs, {sum(j['preemptions'] for j in jobs)} preemptions "
        f"of {len(preempted)} trials"
    )
    rows = [_trial_rows(database, shown["id"]) for shown in (calm, stormy)]
    for label, pick in _COMPARED.items():
        found = [pick(r, shown) for r, shown in zip(rows, (calm, stormy), strict=True)]
        same = "yes" if found[0] == found[1] else "NO"
        print(f"   {label}: {len(found[0])} and {len(found[1])}, identical: {same}")
    best = [_best(shown) for shown in (calm, stormy)]
    print(
        f"   best: trial {best[0][0]} (loss {best[0][1]:.4f}) and trial {best[1][0]} "
        f"(loss {best[1][1]:.4f}), with their points identical: "
        f"{'yes' if best[0] == best[1] else 'NO'}"
    )
    _say_points(api, stormy)


def _verdicts(rows: list[dict[str, Any]], _: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (row["number"], int(rung), *verdict)
        for row in rows
        for rung, verdict in row["rungs"].items()
    )


_COMPARED: dict[str, Callable[[list[dict[str, Any]], dict[str, Any]], list[Any]]] = {
    "trials (number, point)": lambda rows, _: [(r["number"], r["params"]) for r in rows],
    "rung verdicts (trial, rung, value, rank, of, keep)": _verdicts,
    "trials' end states": lambda rows, _: [(r["number"], r["state"]) for r in rows],
}


def _say_points(api: Api, shown: dict[str, Any]) -> None:
    """Every trial's steps: 1..N all logged (none lost), and how many twice (an epoch
    redone after a stop between its point and its checkpoint)."""
    lost = twice = logged = resumed = 0
    for trial in shown["trial_list"]:
        series = api.series(trial["job_id"], "loss")
        steps = [step for one in series for step in one["steps"]]
        logged += len(steps)
        lost += len(set(range(1, max(steps, default=0) + 1)) - set(steps))
        twice += len(steps) - len(set(steps))
        resumed += sum(1 for one in series[1:] if one["steps"] and one["steps"][0] > 1)
    print(
        f"   metric points of the preempted run: {logged} logged, {lost} lost (each trial's "
        f"steps 1..N present: {'yes' if not lost else 'NO'}), {twice} logged twice (an epoch "
        f"redone after a stop between its point and its checkpoint); {resumed} attempts "
        "resumed from a checkpoint"
    )


class Preemptor:
    """Submits an urgent job of every GPU every ``every`` seconds (unless the last one has
    not ended yet): it preempts the running trials of its team, whose priority is lower."""

    def __init__(self, api: Api, every: float) -> None:
        self.api, self.every = api, every
        self.began = time.monotonic()
        self.submitted = 0
        self.last: int | None = None

    def tick(self) -> None:
        due = self.began + self.every * (self.submitted + 1)
        if time.monotonic() < due or (self.last and not self.api.ended(self.last)):
            return
        spec = {"name": "urgent", "command": ["sleep", "1"], "priority": 100,
                "resources": {"gpus": 8}}  # fmt: skip
        self.last = self.api.post("/jobs", spec)["id"]
        self.submitted += 1


def _best(shown: dict[str, Any]) -> tuple[Any, ...]:
    best = shown["best"] or {}
    return best.get("trial"), best.get("value"), json.dumps(best.get("params"), sort_keys=True)


def _trial_rows(database: Path, experiment_id: int) -> list[dict[str, Any]]:
    """The experiment's trials as the server's tables hold them."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        query = "SELECT number, params, state, rungs FROM trials WHERE experiment_id = ?"
        rows = db.execute(query + " ORDER BY number", (experiment_id,)).fetchall()
    return [
        {"number": n, "params": json.loads(p), "state": s, "rungs": json.loads(r or "{}")}
        for n, p, s, r in rows
    ]


# -- 4. the pipeline's passes ------------------------------------------------------------------


def passes(at: int, timed: int, samplers: list[str]) -> None:
    print(
        f"4. the experiments pipeline at {at:,} trials, in-process on SQLite (ASHA, 8 at once, "
        f"the curves of aim 2 with 3 parameters): {timed} passes timed after growing to {at:,}"
    )
    found: list[Passes] = []
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-passes-") as where:
        for sampler in samplers:
            result = measure(sampler, at, timed, 3, Path(where))
            found.append(result)
            print(
                f"   {sampler:<6}: decision {_p(result.decisions, result.decisions_cpu)}; "
                f"each ask {_p(result.asks, result.asks_cpu)}; whole pass "
                f"{_p(result.passes, result.passes_cpu)} (grown in {result.built:.0f} s; then "
                f"{result.trials} trials, {result.points:,} points)"
            )
    for result in found:
        _verdict(result)


def _verdict(result: Passes) -> None:
    p95, pass_p95 = percentile(result.decisions, 95), percentile(result.passes, 95)
    rebuild = statistics.median(result.rebuilds)
    print(
        f"   {result.sampler:<6}: ask + decide p95 {1000 * p95:.1f} ms, cpu "
        f"{1000 * percentile(result.decisions_cpu, 95):.1f} ms (aim < 50 ms: "
        f"{_met(p95 < AIM_P95)}); whole pass p95 {1000 * pass_p95:.1f} ms, cpu "
        f"{1000 * percentile(result.passes_cpu, 95):.1f} ms; rebuild of {result.trials} "
        f"trials and one pass {rebuild:.2f} s (median of {len(result.rebuilds)}; aim < 2 s: "
        f"{_met(rebuild < AIM_REBUILD)})"
    )


def _p(values: list[float], cpu: list[float]) -> str:
    ms, cpu_ms = [1000 * v for v in values], [1000 * v for v in cpu]
    return (
        f"p50 {percentile(ms, 50):.1f} ms p95 {percentile(ms, 95):.1f} ms (cpu p50 "
        f"{percentile(cpu_ms, 50):.1f} p95 {percentile(cpu_ms, 95):.1f})"
    )


# -- the server's API --------------------------------------------------------------------------


class Api:
    """What the benchmark asks of the server."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.http.post(path, json=body)
        if answer.status_code >= 300:
            raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text}")
        return answer.json()

    def run(
        self,
        body: dict[str, Any],
        deadline: float = 900.0,
        during: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Make the experiment, wait for its end (stopping it after ``deadline`` seconds)
        and for its trials' jobs to end; its detail."""
        ref = str(self.post("/experiments", body)["id"])
        until = time.monotonic() + deadline
        while (shown := self.http.get(f"/experiments/{ref}").json())["status"] in ACTIVE:
            if time.monotonic() > until:
                self.http.post(f"/experiments/{ref}/stop")  # 409 once it ended meanwhile
            if during is not None:
                during()
            time.sleep(0.25)
        wait_until(self._idle, 120, 0.25)
        return shown

    def epochs(self, shown: dict[str, Any], metric: str) -> dict[int, int]:
        """Each trial's last step logged (trial number -> epochs it ran)."""
        return {
            t["number"]: max((max(s["steps"]) for s in self.series(t["job_id"], metric)), default=0)
            for t in shown["trial_list"]
        }

    def series(self, job_id: int, metric: str) -> list[dict[str, Any]]:
        """The job's series of ``metric``, one per attempt."""
        answer = self.http.get(f"/jobs/{job_id}/metrics", params={"names": metric}).json()
        return sorted(answer["series"], key=lambda s: s["attempt"])

    def get(self, path: str) -> Any:
        return self.http.get(path).json()

    def job(self, job_id: int) -> dict[str, Any]:
        return self.get(f"/jobs/{job_id}")

    def ended(self, job_id: int) -> bool:
        return self.job(job_id)["status"] in ("succeeded", "failed", "cancelled", "lost")

    def _idle(self) -> bool:
        params = {"limit": 1, "status": ["pending", "starting", "running"]}
        return not self.http.get("/jobs", params=params).json()


# -- small helpers -----------------------------------------------------------------------------


def _trial(program: str, env: dict[str, str]) -> dict[str, Any]:
    """A trial's job: the program run by the server's Python, which sees the virtual
    environment's packages (scikit-learn, gpupool.metrics) inside the job's sandbox."""
    return {"command": [sys.executable, "-c", program], "env": env, "resources": {"gpus": 1}}


def _stopping(name: str, epochs: int) -> dict[str, Any]:
    if name == "none":
        return {"name": "none"}
    return {"name": name, "max_time": epochs, "grace": 1, "reduction_factor": 3}


def _took(shown: dict[str, Any]) -> float:
    return shown["ended_at"] - shown["created_at"]


def _secs(seconds: float | None) -> str:
    return f"{seconds:5.1f} s" if seconds is not None else f"not in {SEARCH_DEADLINE:.0f} s"


def _point(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items()
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about 2 minutes: small sizes")
    parser.add_argument("--aims", default="1,2,3,4", help="which aims to measure (1,2,3,4)")
    parser.add_argument(
        "--samplers", default="random,tpe,cmaes,qmc,grid", help="aim 4's samplers, in order"
    )
    for name in Sizes.__dataclass_fields__:
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None)
    return parser.parse_args()


def _sizes(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else Sizes()
    given = {
        name: type(getattr(base, name))(getattr(args, name))
        for name in Sizes.__dataclass_fields__
        if getattr(args, name) is not None
    }
    return Sizes(**{**base.__dict__, **given})


if __name__ == "__main__":
    sys.exit(main())
