"""The web UI: server-rendered pages (Jinja2) and our own small CSS and JavaScript.

Pages read through the same functions as the REST API, so a page's first render and the
JSON its script polls afterwards have one shape. Nothing is loaded from outside the server:
the UI works air-gapped. Every page is escaped (autoescape on) and served with a strict
Content-Security-Policy: scripts and styles only from /static.
"""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.concurrency import run_in_threadpool

import gpupool
from gpupool.api import charts
from gpupool.api.access import Rule, declare
from gpupool.api.deps import PlatformDep, optional_session
from gpupool.domain.jobs import FINAL_STATUSES, JobStatus, Role
from gpupool.domain.text import escape_unstorable
from gpupool.domain.units import format_bytes, format_duration
from gpupool.domain.views import SubmitOptionsView
from gpupool.errors import InvalidRequest, NotFound
from gpupool.services import cluster, datasets, environments, identity, jobs, metrics, scheduling
from gpupool.services.core import Principal
from gpupool.services.platform import Platform

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
REFRESH_MS = 2000
JOB_ID = re.compile(r"[0-9]{1,18}")
ACTIVE = [JobStatus.PENDING, JobStatus.STARTING, JobStatus.RUNNING]
ENDED = sorted(FINAL_STATUSES)
SHOW = {"all": None, "active": ACTIVE, "ended": ENDED}
TEXT_FIELDS = ("command", "name", "workdir", "code", "env", "environment", "gpu_memory", "memory")
TEXT_FIELDS += ("team", "shm", "procs_per_node")
POLICY_FIELDS = ("gpu_type", "max_runtime", "grace_period")
TORCH_MODES = {
    "per-gpu": "one process per GPU",
    "torchrun": "one torchrun per node",
    "per-node": "the command once per node",
}
BLANK_FORM = (
    dict.fromkeys(TEXT_FIELDS + POLICY_FIELDS, "")
    | {"gpus": "1", "cpus": "1", "priority": "0"}
    | {"preemptible": True, "hold": False}
    | {"nodes": "1", "launcher": ""}
    | {"after": ""}
    | {"datasets": []}
)
# the submit form's launcher choices: value -> text ("torchrun": torch, one torchrun per node)
LAUNCHERS = (
    ("", "None: the command as it is"),
    ("torch", "PyTorch: one process per GPU"),
    ("torchrun", "PyTorch: one torchrun per node"),
    ("tensorflow", "TensorFlow"),
    ("mpi", "MPI"),
)
PERIODS = {"6": "6 hours", "24": "24 hours", "72": "3 days", "168": "7 days"}
BUCKETS = 48  # points of a team's chart
# a node's topology matrix starts open up to this many GPUs (8 GPUs and their NICs fit a
# laptop's width); a bigger one starts collapsed, its summary saying what it holds
TOPOLOGY_OPEN_MAX = 8

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

SignedIn = Annotated[tuple[Principal, str] | None, Depends(optional_session)]
router = APIRouter(include_in_schema=False)


def mount(app: FastAPI) -> None:
    """Add the pages and /static to the app."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(router)


# -- templates ---------------------------------------------------------------------------------


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _iso(epoch: float | None) -> str:
    return "" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


def _number(value: float | int | None) -> str:
    """1.0 -> '1', 0.5 -> '0.5': how a GPU count reads."""
    if value is None:
        return "-"
    return f"{value:g}"


def _percent(fraction: float) -> int:
    return round(fraction * 100)


def _gpus(resources: dict[str, Any]) -> str:
    """A job's GPU request in a few characters: '2', '0.5 · 20 GiB', '20 GiB of one GPU'."""
    count, memory = resources.get("gpus") or 0, resources.get("gpu_memory_bytes")
    if not count and not memory:
        return "none"
    if not count:
        return f"{format_bytes(memory)} of one GPU"
    return _number(count) + (f" · {format_bytes(memory)}" if memory else "")


def _request(spec: dict[str, Any]) -> str:
    """The GPUs column: ``_gpus``, or for a job over several nodes (or with a launcher)
    '2 nodes × 4 GPUs · torch'."""
    nodes = spec.get("nodes") or 1
    if nodes == 1 and not spec.get("launcher"):
        return _gpus(spec["resources"])
    text = f"{nodes} node{'' if nodes == 1 else 's'} × {_node_gpus(spec['resources'])}"
    return text + (f" · {spec['launcher']}" if spec.get("launcher") else "")


def _node_gpus(resources: dict[str, Any]) -> str:
    """What each node of a job over several nodes gets: '4 GPUs', '0.5 GPU', 'no GPU'."""
    count, memory = resources.get("gpus") or 0, resources.get("gpu_memory_bytes")
    if not count:
        return _gpus(resources) if memory else "no GPU"
    text = f"{_number(count)} GPU{'s' if count > 1 else ''}"
    return text + (f" · {format_bytes(memory)}" if memory else "")


def _launcher(spec: dict[str, Any]) -> str:
    """'torch, one process per GPU', 'torch, one torchrun per node', 'mpi'; 'none'."""
    if not spec.get("launcher"):
        return "none: each node runs the command as it is"
    mode, procs = spec.get("launcher_mode"), spec.get("procs_per_node")
    per_node = f", {procs} processes per node" if procs else ""
    if spec["launcher"] != "torch":
        return spec["launcher"] + (f", mode {mode}" if mode else "") + per_node
    return f"torch, {TORCH_MODES.get(mode or 'per-gpu', mode)}{per_node}"


def _from_now(epoch: float | None, now: float) -> str:
    """'in 25m', 'now' (or '25m ago'): how far a time is from ``now``."""
    if epoch is None:
        return ""
    seconds = round(epoch - now)
    if abs(seconds) < 30:
        return "now"
    text = _short(abs(seconds))
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _short(seconds: int) -> str:
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min"
    if seconds < 86400:
        hours, minutes = divmod(round(seconds / 60), 60)
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    days, hours = divmod(round(seconds / 3600), 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _duration(seconds: float) -> str:
    """A duration as people read it: '45 s', '1 min 30 s', '5 min', '2 h 3 min', '1 d 2 h'."""
    total = round(seconds)
    if total < 60:
        return f"{total} s"
    if total < 3600:
        minutes, rest = divmod(total, 60)
        return f"{minutes} min {rest} s" if rest and minutes < 2 else f"{minutes} min"
    if total < 86400:
        hours, minutes = divmod(total // 60, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(total // 3600, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _gpu_hours(gpu_seconds: float | None) -> str:
    """'1.25 GPU-hours'; under 0.01 (36 s on one GPU), 'N GPU-seconds' so a start shows."""
    seconds = gpu_seconds or 0
    if 0 < seconds < 36:
        return f"{seconds:.0f} GPU-seconds"
    return f"{seconds / 3600:.2f} GPU-hours"


def _network(inventory: dict[str, Any]) -> list[str]:
    nics = [n for n in inventory.get("nics", []) if n.get("name") != "lo"]
    up = [n for n in nics if n.get("operstate") == "up"]
    parts = []
    for nic in up:
        speed = nic.get("speed_mbps")
        text = nic["name"] + (f" {speed / 1000:g} Gb/s" if speed else "")
        parts.append(text + (f" (RDMA {nic['rdma_device']})" if nic.get("rdma_device") else ""))
    down = len(nics) - len(up)
    if down:
        parts.append(f"{down} down")
    return parts or ["none found"]


def _rdma(inventory: dict[str, Any]) -> list[str]:
    parts = []
    for device in inventory.get("rdma", []):
        ports = []
        for port in device.get("ports", []):
            bits = [port.get("link_layer"), port.get("rate_gbps") and f"{port['rate_gbps']:g} Gb/s"]
            bits.append(port.get("state"))
            ports.append(" ".join(str(b) for b in bits if b))
        parts.append(device["name"] + (f": {', '.join(ports)}" if ports else ""))
    return parts or ["none found"]


# The topology matrix's words, as ``nvidia-smi topo -m``'s legend says them (fastest first).
LINK_LEGEND = (
    ("X", "the GPU itself"),
    ("NV#", "NVLink, # links"),
    ("PIX", "at most one PCIe bridge"),
    ("PXB", "several PCIe bridges, no host bridge"),
    ("PHB", "a PCIe host bridge (one CPU)"),
    ("NODE", "across PCIe host bridges in one NUMA node"),
    ("SYS", "across NUMA nodes (the CPUs' interconnect)"),
)


def _link_class(cell: str) -> str:
    """'NV4' -> 'link-nv', 'PIX' -> 'link-pix', 'X' -> 'link-self', '' -> 'link-none'."""
    if not cell:
        return "link-none"
    if cell == "X":
        return "link-self"
    return "link-nv" if cell.startswith("NV") else f"link-{cell.lower()}"


ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    bytes=format_bytes,
    when=_when,
    iso=_iso,
    number=_number,
    percent=_percent,
    gpus=_gpus,
    request=_request,
    node_gpus=_node_gpus,
    launcher=_launcher,
    duration=_duration,
    gpu_hours=_gpu_hours,
    from_now=_from_now,
    link_class=_link_class,
)
ENV.globals.update(
    gpupool_version=gpupool.__version__,  # not "version": a model page has its own
    refresh_ms=REFRESH_MS,
    network=_network,
    rdma=_rdma,
    final_statuses=[s.value for s in FINAL_STATUSES],
    link_legend=LINK_LEGEND,
    topology_open_max=TOPOLOGY_OPEN_MAX,
)


def _static(name: str) -> str:
    return f"/static/{name}?v={gpupool.__version__}"


ENV.globals["static"] = _static


def render(
    template: str, who: Principal | None, csrf: str | None, status: int = 200, **context: Any
) -> HTMLResponse:
    """A page of the web UI (``page``: the part of the menu it is under)."""
    html = ENV.get_template(template).render(user=who, csrf_token=csrf, **context)
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)


async def not_found_page(request: Request) -> HTMLResponse:
    """The page for an address no page of the web UI has (404), with the top bar of whoever
    is signed in (``api.errors`` answers it for a UI address, JSON for the API's)."""
    found = await run_in_threadpool(optional_session, request, request.app.state.platform)
    who, csrf = found if found is not None else (None, None)
    path = escape_unstorable(request.url.path)
    return render("page_not_found.html", who, csrf, status=404, page="", path=path)


def to_login(request: Request) -> RedirectResponse:
    """To the sign-in page, back to this page (and its query) once signed in."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)


def _safe_next(target: str | None) -> str:
    """Only a path on this server: no scheme, no host, no '//' (an open redirect)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    if any(ord(c) < 32 for c in target) or "\\" in target:
        return "/"
    return target


# -- pages -------------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
@declare(Rule.PUBLIC)
def login_page(request: Request, signed_in: SignedIn, next: str | None = None) -> Response:
    target = _safe_next(next)
    if signed_in:
        return RedirectResponse(target, status_code=303)
    return render("login.html", None, None, page="login", next=target)


@router.get("/", response_class=HTMLResponse)
@declare(Rule.PAGE)
def cluster_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    shown = cluster.show_pool(ctx, who).model_dump(mode="json")
    return render("cluster.html", who, csrf, page="cluster", pool=shown, isolation=ctx.isolation())


@router.get("/jobs", response_class=HTMLResponse)
@declare(Rule.PAGE)
def jobs_page(
    request: Request,
    ctx: PlatformDep,
    signed_in: SignedIn,
    show: str = "all",
    mine: str = "",
) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    show = show if show in SHOW else "all"
    mine = mine.lower() in ("1", "true", "on", "yes")
    where = jobs.JobFilter(status=SHOW[show] or (), user=who.name if mine else None)
    found = jobs.list_jobs(ctx, who, where)
    rows = [j.model_dump(mode="json") for j in found]
    return render("jobs.html", who, csrf, page="jobs", jobs=rows, show=show, mine=mine)


@router.get("/jobs/new", response_class=HTMLResponse)
@declare(Rule.PAGE)
def submit_page(
    request: Request, ctx: PlatformDep, signed_in: SignedIn, again: str = ""
) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    options = jobs.submit_options(ctx, who)
    earlier = _job_number(again)
    form = BLANK_FORM | (_form_from(ctx, who, earlier) if earlier else {})
    return render(
        "submit.html",
        who,
        csrf,
        page="submit",
        teams=options.teams,
        chosen_team=form.get("team") or _default_team(options),
        form=form,
        viewer=options.viewer,
        max_code_bytes=jobs.code_limits(ctx).max_bytes,
        environments=[e.model_dump(mode="json") for e in environments.list_environments(ctx, who)],
        datasets=[d.model_dump(mode="json") for d in datasets.list_datasets(ctx, who)],
        **_submit_choices(options),
    )


@router.get("/jobs/compare", response_class=HTMLResponse)
@declare(Rule.PAGE)
def compare_page(
    request: Request,
    ctx: PlatformDep,
    signed_in: SignedIn,
    ids: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """Several jobs' metrics overlaid (one chart per metric, a line per job), their specs side
    by side: /jobs/compare?ids=3,4 (the jobs list's "Compare" action)."""
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    parts = [part.strip() for text in ids or [] for part in text.split(",")]  # 3,4 or 3&ids=4
    wanted = [number for part in parts if (number := _job_number(part))]
    try:
        found = metrics.compare(ctx, who, wanted).model_dump(mode="json") | {"problem": None}
    except InvalidRequest as error:
        found = {"jobs": [], "missing": [], "problem": error.message}
    return render("compare.html", who, csrf, page="jobs", compared=found, asked=wanted)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
@declare(Rule.PAGE)
def job_page(request: Request, job_id: str, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    try:
        number = _job_number(job_id)
        if number is None:
            raise NotFound()
        job = jobs.show_job(ctx, who, number).model_dump(mode="json")
    except NotFound:
        return render("not_found.html", who, csrf, status=404, page="job", kind="job", name=job_id)
    spec = job["spec"]
    waiting = _why(ctx, who, number) if job["status"] == JobStatus.PENDING.value else None
    return render(
        "job.html",
        who,
        csrf,
        page="job",
        job=job,
        why=waiting,
        now=ctx.clock.now(),
        command=shlex.join(spec["command"]),
        final=job["status"] in {s.value for s in FINAL_STATUSES},
        can_cancel=who.role != Role.VIEWER,
        again=f"/jobs/new?{urlencode({'again': job['id']})}",
    )


@router.get("/queue", response_class=HTMLResponse)
@declare(Rule.PAGE)
def queue_page(request: Request, ctx: PlatformDep, signed_in: SignedIn) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    queue = scheduling.show_queue(ctx, who).model_dump(mode="json")
    shown = sum(len(team["jobs"]) for team in queue["teams"])
    return render(
        "queue.html", who, csrf, page="queue", queue=queue, shown=shown, now=ctx.clock.now()
    )


@router.get("/teams", response_class=HTMLResponse)
@declare(Rule.PAGE)
def teams_page(
    request: Request, ctx: PlatformDep, signed_in: SignedIn, hours: str = "24"
) -> Response:
    if not signed_in:
        return to_login(request)
    who, csrf = signed_in
    hours = hours if hours in PERIODS else "24"
    shown = [t.model_dump(mode="json") for t in identity.list_teams(ctx, who)]
    found = identity.team_history(ctx, who, float(hours), BUCKETS)
    series = {s.team: s for s in found.teams}
    drawn = {
        name: charts.team_chart(
            found.times,
            found.bucket_seconds,
            {"held": s.held, "fair": s.fair, "demand": s.demand, "guarantee": s.guarantees},
            {
                "held": s.held_now,
                "fair": s.fair_now,
                "demand": s.demand_now,
                "guarantee": s.guarantee,
            },
            s.limit,
        )
        for name, s in series.items()
    }
    return render(
        "teams.html",
        who,
        csrf,
        page="teams",
        teams=shown,
        history=found.model_dump(mode="json"),
        series={name: s.model_dump(mode="json") for name, s in series.items()},
        charts=drawn,
        hours=hours,
        periods=PERIODS,
    )


def _why(ctx: Platform, who: Principal, job_id: int) -> dict[str, Any] | None:
    try:
        return scheduling.why_waits(ctx, who, job_id).model_dump(mode="json")
    except NotFound:
        return None


def _job_number(text: str) -> int | None:
    """A job id from a URL: plain ASCII digits that fit the database, else None."""
    return int(text) if JOB_ID.fullmatch(text) else None


def _form_from(ctx: Platform, who: Principal, job_id: int) -> dict[str, Any]:
    """The fields of an earlier job, to submit it again (only a job the user can see)."""
    try:
        job = jobs.show_job(ctx, who, job_id)
    except NotFound:
        return {}
    spec, resources = job.spec, job.spec.resources
    return {
        "command": shlex.join(spec.command),
        "name": spec.name or "",
        "workdir": spec.workdir or "",
        "code": spec.code or "",
        "environment": (spec.environment or "").partition("@")[0],
        "datasets": [use.name for use in spec.datasets],
        "env": "\n".join(f"{k}={v}" for k, v in spec.env.items()),
        "gpus": _number(resources.gpus) if resources.gpus else "",
        "gpu_memory": _exact_bytes(resources.gpu_memory_bytes),
        "cpus": _number(resources.cpus),
        "memory": _exact_bytes(resources.memory_bytes),
        "shm": _exact_bytes(spec.shm_bytes),
        "team": job.team,
        "priority": str(spec.priority),
        "preemptible": spec.preemptible,
        "gpu_type": ", ".join(spec.gpu_types),
        "max_runtime": _duration_or_blank(spec.max_runtime_seconds),
        "grace_period": _duration_or_blank(spec.grace_period_seconds),
        "nodes": str(spec.nodes),
        "launcher": "torchrun" if spec.launcher_mode == "torchrun" else spec.launcher or "",
        "procs_per_node": str(spec.procs_per_node or ""),
        "hold": spec.hold,
        "after": ", ".join(f"{d.condition.value}:{d.job}" for d in spec.depends_on),
    }


def _default_team(options: SubmitOptionsView) -> str:
    """The team the form starts with: the user's first own team, else its only choice."""
    if options.own_teams:
        return options.own_teams[0]
    return options.teams[0] if len(options.teams) == 1 else ""


def _submit_choices(options: SubmitOptionsView) -> dict[str, Any]:
    """What the submit form offers: the pool's GPU models, the priorities the user's role
    may use (the API answers priority_not_allowed beyond them) and the grace periods."""
    return {
        "gpu_models": options.gpu_models,
        "priority_range": (options.min_priority, options.max_priority),
        "admin_max_priority": options.admin_max_priority,
        "default_grace": format_duration(options.default_grace_seconds),
        "max_grace": format_duration(options.max_grace_seconds),
        "launchers": LAUNCHERS,
    }


def _duration_or_blank(seconds: float | None) -> str:
    return "" if seconds is None else format_duration(seconds)


def _exact_bytes(count: int | None) -> str:
    """A byte count the form sends back unchanged: '20GiB' when exact, else the number."""
    if not count:
        return ""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count % size == 0:
            return f"{count // size}{unit}"
    return str(count)
