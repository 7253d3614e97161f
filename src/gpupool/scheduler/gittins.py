"""The Gittins index of a job's attained service, over the service distribution seen so far.

``Policy.order == "gittins"`` is Tiresias' discretised 2D-Gittins index (NSDI'19): the
least-attained-service levels stay as they are (a job of a lower level goes first and may
preempt), and inside a level the waiting jobs go by their Gittins index, highest first,
instead of by the time they were queued. The index of a job that has received ``a``
GPU-seconds is, over the distribution of the service ``S`` (GPU-seconds) of the jobs that
finished so far::

    G(a) = sup over Δ > 0 of  P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]

the chance of finishing within the next ``Δ`` GPU-seconds per GPU-second it would take: a
job likely to end soon goes first, whatever it has received. Where the distribution's hazard
falls (most jobs short, a few very long) the index falls with ``a`` and the order is LAS;
where it rises (many jobs of about one size) a job near that size goes before a fresh one.
No job's duration is known: only what finished jobs received.

The supremum is taken over quanta on a geometric ladder (each ``QUANTUM_STEP`` times the
last, from the next sample above ``a`` to the largest), each worked out in O(log n) with
prefix sums, so an index costs about a hundred bisections whatever the samples. A job that
has received more than every finished job has index 0: the distribution says nothing of it.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate

QUANTUM_STEP = math.sqrt(2.0)  # the ratio between two quanta of the ladder


@dataclass(frozen=True, eq=False)
class ServiceDistribution:
    """The GPU-seconds of the jobs that finished, sorted, with their prefix sums.

    Made by whoever builds the snapshot (the simulator from the jobs its replay finished,
    the server from its history) and passed in ``Snapshot.service``; immutable, so that a
    cycle may keep the order it gave for as long as the snapshot brings the same object.
    """

    samples: tuple[float, ...]
    prefix: tuple[float, ...]  # prefix[k]: the sum of the first k samples

    @classmethod
    def of(cls, services: Iterable[float]) -> ServiceDistribution:
        samples = tuple(sorted(max(0.0, value) for value in services))
        return cls(samples, (0.0, *accumulate(samples)))

    def __len__(self) -> int:
        return len(self.samples)

    def index(self, attained: float) -> float:
        """The Gittins index of a job that has received ``attained`` GPU-seconds."""
        samples = self.samples
        first = bisect_right(samples, attained)  # the first sample above ``attained``
        if first >= len(samples):
            return 0.0
        best = 0.0
        quantum = max(samples[first] - attained, 1.0)
        widest = samples[-1] - attained
        while True:
            best = max(best, self._ratio(attained, first, quantum))
            if quantum >= widest:
                return best
            quantum = min(quantum * QUANTUM_STEP, widest)

    def _ratio(self, attained: float, first: int, quantum: float) -> float:
        """P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a], both over the m samples above a
        (the m cancels)."""
        samples, prefix = self.samples, self.prefix
        last = bisect_right(samples, attained + quantum)  # samples ending within the quantum
        ending = last - first
        served = prefix[last] - prefix[first] - attained * ending
        served += quantum * (len(samples) - last)
        return ending / served if served > 0 else 0.0
