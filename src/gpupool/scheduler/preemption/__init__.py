"""Choosing running jobs to preempt for a pending one, losing the least work.

A running job may be preempted for a pending job J when it is preemptible, not already
chosen in this cycle, and one of:

* it is already stopping (a preemption or cancel under way): it costs nothing more;
* **reclaim**: it belongs to another team, and either J's team stays within its fair share
  with J while the victim's team stays at or above its own without all the victims of the
  choice, or J's team stays within its guarantee with J while the victim's team is above its
  guarantee and its fair share before this victim (``Eligibility.may_take``); losses add up
  over the victims of one choice and over the cycle; never the other way round, so no cycles;
* **inside J's team**: J outranks it: a higher priority, or the same priority and a lower
  least-attained-service level (the ``srtf`` reference: less work left), and it has run for
  at least ``min_runtime``.

Victims are taken in this order (``RunningJob.key``): stopping ones, other teams' (over their
share) before J's own team's, lowest priority first, highest level, worst standing (an
experiment's worst-ranked trials; every other job stands at 1), then least time since their
last checkpoint (the work a restart loses). For a one-task job the node needing the cheapest
set of victims wins, by ``VictimCost``, which compares sets by the same figures: fewest
victims of J's own team, the worst victim's priority (lower wins) and level (higher wins),
the best victim's standing, then the work lost; the search stops at a node whose floor (the
least any set from its first candidate on can cost) is no cheaper than the best found. A gang
takes victims in that order across nodes until all its tasks fit.
"""

from gpupool.scheduler.preemption.candidates import (
    KeptRunning,
    RunningJob,
    any_victim,
    leased_running,
    running_jobs,
)
from gpupool.scheduler.preemption.rules import FREE, Eligibility, Losses, VictimCost
from gpupool.scheduler.preemption.search import MAX_NODES_EXAMINED, Choice, Preemptor

__all__ = [
    "FREE",
    "MAX_NODES_EXAMINED",
    "Choice",
    "Eligibility",
    "KeptRunning",
    "Losses",
    "Preemptor",
    "RunningJob",
    "VictimCost",
    "any_victim",
    "leased_running",
    "running_jobs",
]
