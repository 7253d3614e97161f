"""The kinds a job file may hold, one entry each: its request body (the API's own model)
and how one document of it is made in the caller's transaction.

A new kind is one more ``Kind`` in ``KINDS``: its body, its ``make`` step (the steps its
own service's API call is made of), ``prepare`` when it has slow work to do first (outside
the transaction: an environment's resolve, a dataset's manifest read or a job's outputs
copied) and, when its service must hear of it once the transaction commits, ``after``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from gpupool.domain.dependencies import Dependency
from gpupool.domain.deployments import DeploymentSpec
from gpupool.domain.environments import EnvironmentCreate
from gpupool.domain.experiments import ExperimentSpec
from gpupool.domain.jobfiles import DatasetBody, JobBody, VolumeBody
from gpupool.domain.notebooks import NotebookRequest
from gpupool.scheduler.types import NodeCapacity
from gpupool.services import datasets, deployments, environments, experiments, jobs, notebooks
from gpupool.services.core import Principal
from gpupool.services.jobfiles._ports import Applies


@dataclass
class Making:
    """What every document's step shares: the caller, the time, the nodes and limits a
    submit checks against, and the jobs made so far by name (for ``depends_on``)."""

    who: Principal
    now: float
    nodes: Sequence[NodeCapacity]
    limits: jobs.JobLimits
    max_array_tasks: int
    jobs_by_name: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Made:
    """What a document made: its id (a job's, an array's, a notebook's, a deployment's;
    None for a document that makes nothing), an array's tasks, and its name."""

    id: int | None
    name: str | None
    job_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Kind:
    name: str
    description: str
    body: type[BaseModel]
    make: Callable[[Session, Any, Making], Made]
    after: Callable[[Applies, Made], None] | None = None
    # the body's field that metadata.name fills
    name_field: str = "name"
    # slow work before the transaction (an environment's resolve), told whether the file
    # is a dry run: its result is what ``make`` is given instead of the body
    prepare: Callable[[Applies, Principal, Any, bool], Any] | None = None


def _job(session: Session, body: JobBody, making: Making) -> Made:
    spec = body.job_spec()
    if spec.depends_on:
        spec = spec.model_copy(update={"depends_on": in_file(spec.depends_on, making.jobs_by_name)})
    who, nodes, now, limits = making.who, making.nodes, making.now, making.limits
    if body.array is None:
        job = jobs.submit(session, who, spec, nodes, now, limits)
        made = Made(job.id, job.name, (job.id,))
    else:
        tasks = jobs.submit_array_tasks(
            session, who, spec, body.array, nodes, now, limits, making.max_array_tasks
        )
        made = Made(tasks.job_ids[0], spec.name, tuple(tasks.job_ids))
    if made.name:
        making.jobs_by_name[made.name] = made.id
    return made


def in_file(deps: Sequence[Dependency], made: Mapping[str, int]) -> list[Dependency]:
    """``deps`` with the names of jobs made by earlier documents of the file as their ids."""
    return [
        d.model_copy(update={"job": made[d.job]}) if isinstance(d.job, str) and d.job in made
        else d
        for d in deps
    ]  # fmt: skip


def _notebook(session: Session, body: NotebookRequest, making: Making) -> Made:
    notebook = notebooks.new_notebook(
        session, making.who, body, making.nodes, making.now, making.limits
    )
    return Made(notebook.id, notebook.name)


def _deployment(session: Session, body: DeploymentSpec, making: Making) -> Made:
    row = deployments.new_deployment(
        session, making.who, body, making.now, tuple(making.nodes), making.limits
    )
    return Made(row.id, row.name)


def _environment(session: Session, resolved: environments.Resolved, making: Making) -> Made:
    version = environments.record(session, making.who, resolved, making.now)
    return Made(version.id, resolved.asked.name)


def _prepare_environment(
    ctx: Applies, who: Principal, body: EnvironmentCreate, dry_run: bool
) -> environments.Resolved:
    return environments.prepare(ctx, who, body)  # a dry run resolves too: it checks the lock


def _dataset(session: Session, ready: datasets.ReadyVersion, making: Making) -> Made:
    version = datasets.record_version(session, making.who, ready, making.now)
    return Made(version.id, ready.name)


def _volume(session: Session, ready: datasets.ReadyVolume, making: Making) -> Made:
    volume = datasets.record_volume(session, making.who, ready, making.now)
    return Made(volume.id, ready.name)


def _experiment(session: Session, body: ExperimentSpec, making: Making) -> Made:
    row = experiments.new_experiment(
        session, making.who, body, making.nodes, making.now, making.limits
    )
    return Made(row.id, row.name)


def _experiment_made(ctx: Applies, made: Made) -> None:
    ctx.experiments.wake()


def _deployment_made(ctx: Applies, made: Made) -> None:
    if made.name:
        ctx.deployments.changed(made.name)


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            "Job",
            "a job or a job array (POST /api/v1/jobs); depends_on may name a Job of the same "
            "file that comes before it",
            JobBody,
            _job,
        ),
        Kind(
            "Environment",
            "a Python environment, or a new version of one (POST /api/v1/environments): "
            "resolved before the file's other documents are made, so a Job after it may "
            "name it",
            EnvironmentCreate,
            _environment,
            prepare=_prepare_environment,
        ),
        Kind(
            "Dataset",
            "the next version of a dataset (POST /api/v1/datasets/NAME/versions): from a "
            "directory (from, uploaded by gpupool apply -f before the file is sent), an "
            "uploaded manifest or an ended job's outputs (from_job); a Job after it in the "
            "file that reads the dataset gets this version",
            DatasetBody,
            _dataset,
            prepare=datasets.prepare_version,
        ),
        Kind(
            "Volume",
            "a volume of the team (POST /api/v1/volumes), or the one it has of that name; "
            "a Job after it in the file may mount it",
            VolumeBody,
            _volume,
            prepare=lambda ctx, who, body, dry_run: datasets.prepare_volume(ctx, who, body),
        ),
        Kind("Notebook", "a JupyterLab (POST /api/v1/notebooks)", NotebookRequest, _notebook),
        Kind(
            "Deployment",
            "a served model or command with replicas (POST /api/v1/deployments)",
            DeploymentSpec,
            _deployment,
            _deployment_made,
        ),
        Kind(
            "Experiment",
            "a hyper-parameter search whose trials are jobs (POST /api/v1/experiments): "
            "objective, parameters, sampler, stopping, and the trial's job with "
            "${params.NAME} in its strings",
            ExperimentSpec,
            _experiment,
            _experiment_made,
        ),
    )
}


def kind_of(name: str) -> Kind | None:
    """The kind named ``name`` (as written: Job; job and JOB are taken too)."""
    for kind in KINDS.values():
        if kind.name.lower() == name.lower():
            return kind
    return None
