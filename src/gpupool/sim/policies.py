"""The policies ``gpupool simulate`` compares, all run by the real scheduler code.

``default`` is the product's policy (``gpupool.domain.policy.Policy()``); the others are
baselines made from the same code with parts switched off or an oracle switched on:

* ``fifo``: one queue in submit order; a job that does not fit blocks every later one.
* ``drf``: fair share between teams (held GPUs per weight) and users, first come first
  served inside a team, a blocked queue head blocks its queue; no backfill, no preemption.
* ``srtf-oracle``: shortest remaining time first with preemption, knowing every job's
  duration: a reference no real scheduler can be, not a product policy.
* ``las``: least-attained-service with many levels (close to Tiresias' continuous LAS).
* ``best-fit``: each job in submit order to its best-fitting spot, and a job that does not
  fit holds back no other (Kubernetes' scheduler with a best-fit score, the baseline of the
  FGD fragmentation study); no fair share, no preemption, no backfill.
* ``fgd``: ``best-fit``'s order with the product's placement, fragmentation-aware
  (``gpupool.scheduler.packing``): the two differ in the placement alone. Every other policy
  places as the product does.
* ``tiresias``: Tiresias' discretised 2D-LAS, DLAS-GPU, as its simulator runs it
  (``run_sim.py --schedule=dlas-gpu``, NSDI'19): three queues split at 3,250 and 7,200
  GPU-seconds of attained service, one list per queue in which the running jobs stand before
  the waiting ones (``Policy.dlas_queues``), a job demoted the moment it crosses a threshold
  (``Policy.level_wakeups``), a job of a higher queue preempting the lower queues' jobs, jobs
  that do not fit passed over; no starvation rule (its ``dlas-gpu-N`` variants have one), no
  fair share, no backfill, no priorities. Its placement is GPU counting: replay it with
  ``--placement count`` to compare with the paper (3.83 h on its Philly subset).

``default`` and ``las`` run the product's bounded cycles (``Policy.max_starts``,
``Policy.max_tries``), as the server does; the baselines try every job in every cycle. The
simulator skips the explanations of pending jobs (nobody reads them there).
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.domain.policy import DEFAULT_POLICY, Policy

UNBOUNDED = {"max_starts": 0, "max_tries": 0}  # the baselines: each cycle tries every job

NAMED: dict[str, Policy] = {
    "default": DEFAULT_POLICY,
    "fifo": Policy(
        order="fifo",
        fair_share=False,
        reclaim=False,
        las_preemption=False,
        backfill=False,
        skip_blocked=False,
        **UNBOUNDED,
    ),
    "drf": Policy(
        las_thresholds=(),
        reclaim=False,
        las_preemption=False,
        backfill=False,
        skip_blocked=False,
        **UNBOUNDED,
    ),
    "srtf-oracle": Policy(order="srtf", backfill=False, **UNBOUNDED),
    "las": replace(DEFAULT_POLICY, las_thresholds=tuple(3600.0 * 2.0**k for k in range(-4, 12))),
}
# fifo's one queue in which a job that does not fit holds back no other, placed by best fit
NAMED["best-fit"] = replace(NAMED["fifo"], skip_blocked=True, packing="best-fit")
# best-fit's order with the product's placement: the two differ in the placement alone
NAMED["fgd"] = replace(NAMED["best-fit"], packing="fgd")
# DLAS-GPU: the queue limits of Tiresias' simulator (jobs.py: 3250, 7200; its third limit,
# 18000, is never reached with three queues); best fit stands for its GPU counting
NAMED["tiresias"] = Policy(
    las_thresholds=(3250.0, 7200.0),
    fair_share=False,
    reclaim=False,
    backfill=False,
    packing="best-fit",
    locality=False,
    dlas_queues=True,
    level_wakeups=True,
    **UNBOUNDED,
)


def named(name: str) -> Policy:
    """The policy of a name, as the simulator runs it (no explanations)."""
    found = NAMED.get(name)
    if found is None:
        raise KeyError(name)
    return replace(found, explain=False)
