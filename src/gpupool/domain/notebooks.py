"""Notebooks: a JupyterLab of one user, run as a job of kind "notebook" in the user's
workspace, reached through the platform's proxy at ``/notebooks/<id>/``.

A notebook is a record (owner, team, name, resources, state, why it stopped); while it runs
it has a job. Its idle rule is decided here, from what the watch read (the Jupyter server's
kernels and the job's GPU samples), without any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpupool.domain.jobs import GpuTypes, ResourceRequest
from gpupool.domain.text import STORABLE, ShownText
from gpupool.domain.views import View

# Where the JupyterLab of notebook N is served, on the platform and (as its base_url) by
# JupyterLab itself: the proxy forwards the path unchanged.
BASE_PATH = "/notebooks/{id}/"
DEFAULT_IDLE_SECONDS = 1800.0
TOKEN_ENV = "JUPYTER_TOKEN"
# JupyterLab is started by a small shell line, so that the address and port its executor
# gives it at start (GPUPOOL_LISTEN_HOST, PORT) reach its command line, and its own files
# go where the sandbox lets it write: its settings and IPython's history in the workspace
# (they persist); its configuration and runtime files (kernel connection keys) in the
# sandbox's private /tmp, so that no configuration planted in the workspace (one could turn
# its token off) is ever read by it.
LAUNCH = (
    '[ -n "$JUPYTER_TOKEN" ] || { echo "gpupool: no notebook token; not starting" >&2; exit 1; }; '
    'export JUPYTER_CONFIG_DIR="${TMPDIR:-/tmp}/jupyter-config" IPYTHONDIR="$PWD/.ipython" '
    'JUPYTER_RUNTIME_DIR="${TMPDIR:-/tmp}/jupyter-runtime"; '
    # with a Python environment: its python is the default kernel (runner.kernelspec)
    'if [ -n "$VIRTUAL_ENV" ]; then export JUPYTER_PATH="${TMPDIR:-/tmp}/jupyter-data"; '
    '"$0" -m gpupool.runner.kernelspec "$JUPYTER_PATH" || exit 1; fi; '
    'exec "$0" -m jupyterlab --ServerApp.ip="$GPUPOOL_LISTEN_HOST" --ServerApp.port="$PORT" '
    '--LabApp.user_settings_dir="$PWD/.jupyter/lab/user-settings" '
    '--LabApp.workspaces_dir="$PWD/.jupyter/lab/workspaces" "$@"'
)


class NotebookState(StrEnum):
    """Where a notebook stands. ``pending``: its job waits for the scheduler;
    ``stopping``: stopped, its job still ending."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class StopCause(StrEnum):
    """Why a notebook stopped (machine-readable; the message says it to the user)."""

    IDLE = "IdleGpuRelease"  # its kernels were idle and its GPUs unused for the idle time
    USER = "StoppedByUser"  # its owner, a team member or an admin stopped it
    ENDED = "JobEnded"  # its job ended by itself (JupyterLab exited, failed, was lost)


class NotebookRequest(BaseModel):
    """A notebook to start. ``resources``: as a job's (``gpus``: whole GPUs or a share of
    one, 0.5; none: a notebook without a GPU). ``team``: the team to charge (needed when
    you are in several)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=100), STORABLE] | None = None
    team: Annotated[str, Field(max_length=100), STORABLE] | None = None
    resources: ResourceRequest = Field(default_factory=ResourceRequest)
    gpu_types: GpuTypes = Field(
        default_factory=list,
        description="GPU models it may run on (as a job's gpu_types): 'H100', 'A100-80GB'",
    )
    environment: Annotated[str, Field(max_length=200), STORABLE] | None = Field(
        default=None,
        description="a Python environment of its team (NAME or NAME@ID, gpupool env ls): its "
        "python is the notebook's kernel, and comes first on its terminals' PATH",
    )

    @field_validator("name", "team", "environment")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        return (value.strip() or None) if value is not None else None


class NotebookView(View):
    """A notebook as its team sees it (never its token). ``url``: where its owner opens it;
    ``idle_seconds``: how long it has been idle at the watch's last look (None: not known)."""

    id: int
    name: ShownText | None
    user: str
    team: str
    state: NotebookState
    resources: ResourceRequest
    gpu_types: list[str]
    environment: str | None = Field(
        default=None, description="its Python environment, as asked (NAME or NAME@ID)"
    )
    job_id: int | None
    job_status: str | None
    message: ShownText | None = Field(description="why it waits, or why it stopped")
    stop_reason: str | None
    created_at: float
    started_at: float | None
    stopped_at: float | None
    active_at: float | None = Field(description="its last kernel or GPU activity seen")
    idle_seconds: float | None
    url: str


class IdleGpuView(View):
    """A running notebook that holds GPUs and used none of them lately (the admin's view)."""

    notebook_id: int
    name: ShownText | None
    user: str
    team: str
    gpus: float
    node: str | None
    idle_seconds: float
    released_in_seconds: float | None = Field(description="None: it is never released for idling")


@dataclass(frozen=True)
class Kernel:
    """One kernel, as the Jupyter server's ``/api/kernels`` lists it."""

    busy: bool
    last_activity: float | None  # epoch seconds


@dataclass(frozen=True)
class Verdict:
    """The watch's conclusion: the latest activity seen, and whether to stop the notebook."""

    active_at: float
    stop: bool


def token_env(token: str) -> dict[str, str]:
    """How a notebook's JupyterLab is given its token: in its environment (JupyterLab reads
    JUPYTER_TOKEN), which only the job's own sandbox and root can read; never on its
    command line, in its spec or in its log."""
    return {TOKEN_ENV: token}


def base_path(notebook_id: int) -> str:
    return BASE_PATH.format(id=notebook_id)


def launch_command(python: str, notebook_id: int) -> list[str]:
    """The notebook job's command: JupyterLab bound to the address and port its executor
    gives it, under ``base_path``, rooted in the working directory (the user's workspace).
    Its token is not on the command line: JupyterLab reads it from JUPYTER_TOKEN."""
    options = [
        "--no-browser",
        "--allow-root",  # only where isolation is off on a root server: jobs never run as root
        f"--ServerApp.base_url={base_path(notebook_id)}",
        "--ServerApp.port_retries=0",
        # reached only through the platform's proxy, which checks who calls and where from;
        # the token (added by the proxy) guards the port against everything else
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.trust_xheaders=True",
        "--ServerApp.allow_origin=*",
        # the pool may be air-gapped: nothing asks the internet for news or updates
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    return ["/bin/sh", "-c", LAUNCH, python, *options]


def judge(
    kernels: list[Kernel],
    active_at: float,
    gpu_busy: bool | None,
    now: float,
    idle_seconds: float,
) -> Verdict:
    """The idle rule: a busy kernel, or any GPU use since ``active_at`` (``gpu_busy`` True),
    is activity now; else the newest kernel activity counts. The notebook is stopped once
    nothing happened for ``idle_seconds``. ``gpu_busy`` None (GPUs that report no
    utilisation) leaves kernel activity alone to decide."""
    if gpu_busy or any(kernel.busy for kernel in kernels):
        return Verdict(now, False)
    seen = [k.last_activity for k in kernels if k.last_activity is not None]
    latest = max([active_at, *seen])
    return Verdict(latest, now - latest >= idle_seconds)


def idle_message(idle_seconds: float, gpu_reports: bool) -> str:
    """What the user reads on a notebook stopped for idling."""
    said = (
        f"Stopped after {duration(idle_seconds)} idle: no kernel activity and 0 % GPU "
        "utilisation; resume to start it again in the same workspace"
    )
    if gpu_reports:
        return said
    return said + (
        " (its GPUs are declared and report no utilisation: kernel activity alone decided)"
    )


def duration(seconds: float) -> str:
    """'30 min', '1 h 30 min', '45 s': an idle time as the user reads it."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    if not hours:
        return f"{minutes} min"
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def stopped_by_message(who: str) -> str:
    return f"stopped by {who}; resume to start it again in the same workspace"


def ended_message(job_status: str, job_message: str | None) -> str:
    """A notebook whose job ended by itself (JupyterLab exited, or the job failed)."""
    detail = f": {job_message}" if job_message else ""
    return f"its job {job_status}{detail}; resume to start it again in the same workspace"
