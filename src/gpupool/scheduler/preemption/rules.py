"""Which running job may be taken for which pending job (``Eligibility``: reclaim between
teams, least-attained service within one, ``min_runtime``), and what a set of victims
costs (``VictimCost``: its order stated once, for the cost, the floor and the bound)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from gpupool.domain.policy import Policy
from gpupool.scheduler.ledger import EPSILON, Ledger
from gpupool.scheduler.preemption.candidates import RunningJob
from gpupool.scheduler.types import PendingJob


class Preemptor(Protocol):
    """What the rules read of the cycle's search (``search.Preemptor``)."""

    ledger: Ledger
    policy: Policy
    now: float
    taken: set[int]

    def rank(self, job: PendingJob, level: int) -> tuple: ...


class VictimCost(NamedTuple):
    """What taking a set of victims costs a pending job of some team; lower is cheaper,
    compared field by field in this order (the one statement of it)."""

    any: bool  # False: only stopping jobs, which cost nothing more
    own: int  # victims of the pending job's own team
    worst: tuple  # the worst victim's (priority, -level): the lowest first
    standing: float  # the best victim's standing (trials: the worst-ranked go first)
    lost: float  # GPU-seconds of work the victims lose
    count: int  # victims

    @classmethod
    def of(cls, victims: Iterable[RunningJob], team: str) -> VictimCost:
        counted = [victim for victim in victims if not victim.stopping]
        return cls(
            len(counted) > 0,
            sum(1 for victim in counted if victim.team == team),
            max(((v.priority, -v.level) for v in counted), default=()),
            max((v.standing for v in counted), default=1.0),
            sum(victim.work_lost for victim in counted),
            len(counted),
        )

    @classmethod
    def floor(cls, first: RunningJob, own: bool) -> VictimCost:
        """At most the cost of any set of victims taken from ``first`` on, in key order:
        each later one has the same (priority, level) and no better standing nor less work
        lost, or a worse (priority, level)."""
        if first.stopping:
            return FREE
        worst = (first.priority, -first.level)
        return cls(True, 1 if own else 0, worst, first.standing, first.work_lost, 1)

    @classmethod
    def bound(cls, candidates: Sequence[RunningJob], own: bool) -> VictimCost:
        """At most the cost of any set of one or more of ``candidates`` (none stopping)."""
        return cls(
            True,
            1 if own else 0,
            min((c.priority, -c.level) for c in candidates),
            min(c.standing for c in candidates),
            min(c.work_lost for c in candidates),
            1,
        )


FREE = VictimCost(False, 0, (), 0.0, 0.0, 0)  # only stopping victims: below any other cost


class Eligibility:
    """Whether a running job may be preempted for one pending job."""

    __slots__ = (
        "_teams",
        "by_fair_share",
        "by_guarantee",
        "gpus",
        "job",
        "level",
        "possible",
        "preemptor",
        "rank",
        "reclaim",
    )

    def __init__(self, preemptor: Preemptor, job: PendingJob, level: int, gpus: float):
        self.preemptor = preemptor
        self.job = job
        self.level = level
        self.gpus = gpus
        policy = preemptor.policy
        ledger = preemptor.ledger
        self.by_fair_share = policy.reclaim and ledger.within_fair_share(job.team, gpus)
        self.by_guarantee = policy.reclaim and ledger.within_guarantee(job.team, gpus)
        self.reclaim = self.by_fair_share or self.by_guarantee
        self._teams: dict[str, tuple[float, float, float]] = {}  # held, fair share, floor
        self.rank = preemptor.rank(job, level)
        self.possible = True

    def __call__(self, victim: RunningJob) -> bool:
        preemptor = self.preemptor
        if victim.job_id in preemptor.taken:
            return False
        if victim.stopping:
            return True
        if not victim.preemptible:
            return False
        if victim.team != self.job.team:
            return self.reclaim and self.may_take(victim, 0.0)
        policy = preemptor.policy
        if not policy.las_preemption:
            return False
        if preemptor.now - victim.started_at < policy.min_runtime:
            return False
        if policy.order == "srtf":
            rank = (-victim.priority, victim.remaining)
        else:
            rank = (-victim.priority, victim.level)
        return self.rank < rank

    def _figures(self, team: str) -> tuple[float, float, float]:
        figures = self._teams.get(team)
        if figures is None:
            ledger = self.preemptor.ledger
            figures = self._teams[team] = (
                ledger.held[team],
                ledger.fair.get(team, 0.0),
                ledger.reclaim_floor(team),
            )
        return figures

    def team_possible(self, team: str, least_gpus: float) -> bool:
        """Whether any job of another ``team`` (the smallest holding ``least_gpus``) may be
        taken by ``may_take`` with nothing lost yet (a necessary condition only)."""
        held, fair, floor = self._figures(team)
        if self.by_fair_share and held - least_gpus >= fair - EPSILON:
            return True
        return self.by_guarantee and held > floor + EPSILON

    def may_take(self, victim: RunningJob, lost: float) -> bool:
        """Whether another team's ``victim`` may go, its team losing ``lost`` already (to
        the victims chosen before it in the same choice; earlier choices are in ``held``).

        * Fair share: J's team stays within its fair share with J, and the victim's team
          stays at or above its own without every victim of the choice.
        * Guarantee: J's team stays within its guarantee with J, and the victim's team is
          still above its guarantee and its fair share before this victim, so that a
          guarantee is reclaimable even where fair shares are fractions of a GPU or a borrower
          runs one large job (the last victim may leave its team below its fair share, never
          more).

        Neither lets the victim's team take the GPUs back: it could only preempt a team above
        its fair share (J's team is within its own) or above its guarantee (J's team is not),
        so no preemption is answered by another.
        """
        return self.may_take_of(victim.team, victim.gpus, lost)

    def may_take_of(self, team: str, gpus: float, lost: float) -> bool:
        """``may_take`` of a job of ``team`` holding ``gpus``: false for any bigger."""
        held, fair, floor = self._figures(team)
        held -= lost
        if self.by_fair_share and held - gpus >= fair - EPSILON:
            return True
        return self.by_guarantee and held > floor + EPSILON

    def losses(self) -> Losses:
        return Losses(self)


class Losses:
    """The GPUs each other team loses to one choice of victims, so that the rules hold for
    all the victims together, not only for each alone."""

    __slots__ = ("eligible", "lost")

    def __init__(self, eligible: Eligibility):
        self.eligible = eligible
        self.lost: dict[str, float] = {}

    def add(self, victim: RunningJob) -> bool:
        """Count ``victim`` in, if the victims so far leave room for it."""
        if victim.stopping or victim.team == self.eligible.job.team:
            return True
        lost = self.lost.get(victim.team, 0.0)
        if not self.eligible.may_take(victim, lost):
            return False
        self.lost[victim.team] = lost + victim.gpus
        return True
