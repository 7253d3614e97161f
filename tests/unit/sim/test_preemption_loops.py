"""No preemption loops: a job that preempts gets the GPUs its victims free (nominations).

The replay stops victims at once and runs the cycle again at the same instant, so a loop (the
freed GPUs going to another job, the preempting job preempting again) shows as a job
preempted several times at one instant. The Philly week that exposed it (team 2869ce's 8-GPU
jobs preempted for its 32-GPU gangs on 48x8: 1,118 preemptions, one job 213 times) runs when
the traces are beside the repository.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpupool.scheduler import schedule
from gpupool.sim.engine import cluster, simulate
from gpupool.sim.traces import load_trace
from tests.support.traces import job

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"
WEEK = "?start=2017-11-01&end=2017-11-08"


class Recorder:
    """The scheduler, noting what each cycle was given and what it decided."""

    def __init__(self) -> None:
        self.cycles: list[tuple[float, dict, dict]] = []
        self.at_once: Counter[tuple[int, float]] = Counter()  # preemptions per job and instant

    def __call__(self, snapshot, clock):  # noqa: ANN001, ANN204
        decisions = schedule(snapshot, clock)
        self.cycles.append((clock.now(), dict(snapshot.nominations), dict(decisions.nominations)))
        for preemption in decisions.preemptions:
            self.at_once[(preemption.job_id, clock.now())] += 1
        return decisions


def test_the_replay_carries_a_nomination_to_the_next_cycle_and_drops_it_at_the_start():
    # four long one-GPU jobs reach the third level; a four-GPU job of the team preempts them
    jobs = [job(1 + k, 0.0, 300_000.0, 1) for k in range(4)] + [job(9, 40_000.0, 1_000.0, 4)]
    recorder = Recorder()

    result = simulate(jobs, cluster("1x4"), restart_cost=60.0, policy=recorder)

    made = [i for i, (_, _, after) in enumerate(recorder.cycles) if 9 in after]
    assert made, "job 9 preempted and was nominated"
    first = made[0]
    assert recorder.cycles[first + 1][1] == recorder.cycles[first][2]  # given back next cycle
    assert all(9 not in given for _, given, _ in recorder.cycles[first + 2 :])
    assert result.preemptions == 4
    assert max(record.preemptions for record in result.records) == 1


@pytest.mark.skipif(
    not (TRACES / "philly.csv").is_file(), reason=f"{TRACES} is absent: traces live beside the repo"
)
def test_a_philly_week_on_48_nodes_has_no_preemption_loop():
    jobs = load_trace(f"philly:{TRACES / 'philly.csv'}{WEEK}").jobs
    recorder = Recorder()

    result = simulate(jobs, cluster("48x8"), restart_cost=60.0, policy=recorder)

    per_job = Counter({record.job_id: record.preemptions for record in result.records})
    assert not result.unscheduled
    assert max(recorder.at_once.values()) == 1  # no job preempted twice at one instant
    assert result.preemptions / len(result.records) < 1
    # the most a job is preempted: 11 (LAS and reclaim, hours apart), not hundreds
    assert max(per_job.values()) <= 20
