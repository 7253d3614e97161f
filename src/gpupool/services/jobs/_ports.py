"""What the jobs' services need of the running server beyond ``core.Reads`` ... ``Submits``:
the executor, which knows where an attempt's log is (``_logs``).

It lives with the jobs (not in ``services.core``) because only reading a job's log needs it:
the shared context stays free of any capability's needs.
"""

from __future__ import annotations

from typing import Protocol

from gpupool.executors.base import Executor
from gpupool.services.core import Reads


class LogReads(Reads, Protocol):
    """What reading a job's log needs: the database, and the executor that turns an
    attempt's stored state into the path of its log."""

    @property
    def executor(self) -> Executor: ...
