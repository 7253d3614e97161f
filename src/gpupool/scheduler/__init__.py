"""The scheduler: a pure function from a snapshot of the pool to decisions.

``schedule(snapshot, clock, state)`` runs one cycle (``state``: the ``SchedulerState`` its
caller keeps from one cycle to the next); ``infeasible_reason(request, nodes)`` says why
a request could never run on the given nodes (the API refuses such a submit).

Modules, by phase: ``capacity`` (1, free capacity and its indexes), ``ordering`` (2, the
policy), ``placement`` (3, best fit), ``reasons``/``shortfall``/``messages`` (4, why a job
waits); ``fit`` holds the predicates placement and reasons share; ``cycle`` ties them;
``state`` holds what cycles keep.
"""

from gpupool.scheduler.cycle import schedule
from gpupool.scheduler.reasons import infeasible_reason
from gpupool.scheduler.state import SchedulerState

__all__ = ["SchedulerState", "infeasible_reason", "schedule"]
