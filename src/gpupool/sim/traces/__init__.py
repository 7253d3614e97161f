"""Workload traces for the simulator: two public GPU-cluster traces and a generic CSV.

Every loader returns a :class:`Trace`: jobs with a submit time (seconds after the trace's first
submit), a run time, a team, a user and a :class:`ResourceRequest`, plus the cluster's nodes when
the trace ships a node list. Parsing is pure (stdlib ``csv``, no I/O beyond reading the file).
A module per format, each with its loader:

- ``philly:PATH[?teams=a,b&start=2017-10-01&end=2017-11-01&limit=N]`` — the Philly-derived CSV
  (``philly``, :func:`load_philly`).
- ``alibaba:PODS[?nodes=NODES]`` — an Alibaba ``openb`` pod list, optionally with a node list
  (``alibaba``, :func:`load_alibaba`).
- ``csv:PATH`` — the generic CSV (``generic``, :func:`load_generic`: its columns are described
  there).
- a bare path — the format is chosen by the file's header (``spec``, :func:`load_trace`).

docs/scheduling.md, "The traces", says where the public traces come from. They are taken as
published: rows whose run time or GPU count is not positive are skipped and counted in
:attr:`Trace.skipped`; rows that cannot be parsed at all are errors. The generic format is
strict: a malformed or unusable row is a ``ValueError`` naming its line.
"""

from gpupool.sim.traces._common import UNTIMED_DURATION, Trace, TraceJob
from gpupool.sim.traces.alibaba import (
    ALIBABA_DEFAULT_TEAM,
    GPU_MEMORY_BYTES,
    load_alibaba,
    load_alibaba_nodes,
)
from gpupool.sim.traces.generic import load_generic
from gpupool.sim.traces.philly import PHILLY_CPUS, load_philly
from gpupool.sim.traces.spec import FORMATS, load_trace

__all__ = [
    "ALIBABA_DEFAULT_TEAM",
    "FORMATS",
    "GPU_MEMORY_BYTES",
    "PHILLY_CPUS",
    "UNTIMED_DURATION",
    "Trace",
    "TraceJob",
    "load_alibaba",
    "load_alibaba_nodes",
    "load_generic",
    "load_philly",
    "load_trace",
]
