"""Jobs from submit to their last event: jobs, arrays, stops, checkpoints, logs, code.

Submitting, listing and cancelling (``_jobs``), job arrays (``_arrays``), why and how a job
stops (``_stops``) and what its attempts' ends do to it (``_transitions``), checkpoints
watched (``_checkpoints``), the jobs a job waits for (``_dependencies``), logs (``_logs``),
code snapshots and uploads (``_code``, ``_incoming``), the model files a job may be shown
(``_model_files``), where a listening job is reached (``_endpoints``), the job read models
(``_views``) and what reading a log needs of the server beyond the core ports (``_ports``).
It imports
``services.core`` and ``services.identity``; scheduling, metrics,
models, notebooks and deployments build on it.
"""

from __future__ import annotations

from gpupool.services.jobs._arrays import (
    array_env,
    cancel_array,
    list_arrays,
    show_array,
    show_task,
    submit_array,
)
from gpupool.services.jobs._arrays import submit as submit_array_tasks
from gpupool.services.jobs._checkpoints import CheckpointWatcher, Watched
from gpupool.services.jobs._code import INCOMING as CODE_INCOMING
from gpupool.services.jobs._code import archive_path as code_archive_path
from gpupool.services.jobs._code import limits as code_limits
from gpupool.services.jobs._code import receive as receive_code
from gpupool.services.jobs._code import show_code
from gpupool.services.jobs._dependencies import Settled as DependenciesSettled
from gpupool.services.jobs._dependencies import carry_out as settle_dependencies
from gpupool.services.jobs._dependencies import plan as plan_dependencies
from gpupool.services.jobs._endpoints import endpoint_of, endpoints_of
from gpupool.services.jobs._envbuilds import BuildLimits, Lacking, NewBuild, build_first
from gpupool.services.jobs._incoming import Incoming, sweep_leftovers
from gpupool.services.jobs._jobs import (
    MAX_LIST,
    JobFilter,
    JobLimits,
    admit,
    cancel,
    cancel_job,
    cancel_pending,
    finish,
    flag_cancel,
    get_job,
    hold_job,
    job_events,
    list_jobs,
    record,
    release_job,
    show_job,
    submit,
    submit_job,
    submit_options,
)
from gpupool.services.jobs._logs import (
    MAX_CHUNK,
    MAX_RANK,
    LineFilter,
    LogCursor,
    follow_step,
    open_log,
    read_log,
)
from gpupool.services.jobs._stops import (
    ACTIVE_ATTEMPT,
    StopRequest,
    cancelled,
    over_storage_quota,
    past_max_runtime,
    preempted,
    stopped_early,
)
from gpupool.services.jobs._stops import record as record_stop
from gpupool.services.jobs._transitions import apply as apply_transition
from gpupool.services.jobs._transitions import requeue
from gpupool.services.jobs._views import job_view

__all__ = [
    "ACTIVE_ATTEMPT",
    "CODE_INCOMING",
    "BuildLimits",
    "CheckpointWatcher",
    "DependenciesSettled",
    "Incoming",
    "Lacking",
    "NewBuild",
    "JobFilter",
    "JobLimits",
    "LineFilter",
    "LogCursor",
    "MAX_CHUNK",
    "MAX_LIST",
    "MAX_RANK",
    "StopRequest",
    "Watched",
    "admit",
    "apply_transition",
    "array_env",
    "build_first",
    "cancel",
    "cancel_array",
    "cancel_job",
    "cancel_pending",
    "cancelled",
    "code_archive_path",
    "code_limits",
    "endpoint_of",
    "endpoints_of",
    "finish",
    "flag_cancel",
    "follow_step",
    "get_job",
    "hold_job",
    "job_events",
    "job_view",
    "list_arrays",
    "list_jobs",
    "open_log",
    "plan_dependencies",
    "over_storage_quota",
    "past_max_runtime",
    "preempted",
    "read_log",
    "receive_code",
    "record",
    "record_stop",
    "release_job",
    "requeue",
    "show_array",
    "show_code",
    "show_job",
    "settle_dependencies",
    "show_task",
    "stopped_early",
    "submit",
    "submit_array",
    "submit_array_tasks",
    "submit_job",
    "submit_options",
    "sweep_leftovers",
]
