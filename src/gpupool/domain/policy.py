"""The scheduling policy's knobs, as data: the scheduler reads them from its snapshot, the
settings build them from ``GPUPOOL_*`` variables, the simulator names a few of its own.

Here, in ``domain``, so that what needs only the knobs (the settings, which every process
of gpupool loads, executors and node agents among them) does not load the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Policy:
    """The knobs of the scheduling policy (the defaults are the product's defaults).

    ``las_thresholds``: attained-service boundaries (GPU-seconds) of the discrete
    least-attained-service levels inside a team (Tiresias' discretised LAS).
    ``starvation_factor``: a job that has waited this many times its attained service (and
    at least ``starvation_min_wait``) goes back to the first level (0 disables).
    ``fair_share``: order users inside a team by decayed usage / weight; teams above their
    guarantee by GPUs held beyond it / weight. ``reclaim``: preempt borrowed work for an owner's
    guaranteed share. ``las_preemption``: inside a team, a job of a higher priority or a
    lower level preempts a preemptible job of a lower one. ``backfill``: reserve the spot of
    a blocked queue head (EASY backfill). ``skip_blocked``: a job that does not fit does not
    hold back the jobs behind it (False: strict queues, for the baselines).
    ``min_runtime``: a job runs at least this long before it may be preempted for LAS or
    priority (never for a fair share). ``usage_half_life``: the decay of past usage (for
    whoever builds ``Snapshot.usage``). ``placement_charge``: GPU-seconds of usage a
    placement adds to its user for the rest of the cycle, so that equal users alternate.
    ``explain``: work out reasons for the jobs left pending (the simulator skips them).
    ``packing``: where a GPU task goes among the spots it fits: ``"fgd"``, where the
    fragmentation of the pool grows least for the workload of the snapshot (FGD), best fit
    breaking ties; ``"best-fit"``, where the least is left over (``placement``).

    ``max_starts``: a cycle that has started (or preempted for) this many jobs hands them to
    its caller, who starts them while the cycle goes on (``schedule``'s ``hand_over``; as
    Slurm's ``sched_max_job_start`` bounds what one pass starts), so that the first jobs of a
    burst start without waiting for the whole cycle; it changes no decision. ``max_tries``:
    after this many jobs of one user could not start, a cycle tries no more of that user's
    (Slurm's ``bf_max_job_user``): they wait until those start or leave, and a cycle over a
    long queue stays short. 0: no bound (the simulator's baselines).

    ``locality``: a job that fetches things onto its nodes before it starts (``wants``: an
    environment, a dataset version, an image) goes, among the spots where it fits now, to
    the node with the fewest bytes left to fetch; equal spots keep the order of ``packing``.
    It never makes a job wait for such a node (False: ``packing`` alone).

    ``dlas_queues``: each level is one queue as in Tiresias' DLAS (the simulator's
    ``tiresias`` baseline): a job preempted after it ran at its level goes back before the
    jobs waiting there, the last preempted first; a job that has only just reached a level
    stands behind them, and they may preempt it. ``level_wakeups``: whoever replays the
    policy also runs a cycle when a running job crosses a threshold (the simulator; the
    server's loop runs often enough without).
    """

    # "las"; "gittins": LAS levels, each in Gittins-index order (``Snapshot.service``);
    # "fifo": one queue in submit order; "srtf": needs remaining
    order: str = "las"
    las_thresholds: tuple[float, ...] = (1800.0, 36000.0, 360000.0)
    starvation_factor: float = 0.0
    starvation_min_wait: float = 3600.0
    fair_share: bool = True
    reclaim: bool = True
    las_preemption: bool = True
    backfill: bool = True
    skip_blocked: bool = True
    min_runtime: float = 0.0
    usage_half_life: float = 7 * 86400.0
    placement_charge: float = 600.0
    explain: bool = True
    packing: str = "fgd"  # or "best-fit"
    max_starts: int = 100
    max_tries: int = 32
    locality: bool = True
    dlas_queues: bool = False
    level_wakeups: bool = False


DEFAULT_POLICY = Policy()
