"""Job files (`gpupool apply -f`): documents of a kind, sent together, applied all or none.

A document is written as kubectl's are::

    apiVersion: gpupool/v1
    kind: Job                  # Job | Notebook | Deployment (services.jobfiles's registry)
    metadata:
      name: train              # the body's name
    spec:                      # the API's request body of that kind, field for field
      command: [python, train.py]
      resources: {gpus: 1}
      depends_on: [prep]       # a Job may name a Job of the same file that comes before it

``spec`` is validated against the kind's body on the server (``services.jobfiles``), so
its fields are exactly those of ``POST /api/v1/jobs`` (``JobBody``), ``/notebooks`` and
``/deployments``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.jobs import JobSpec
from gpupool.domain.text import STORABLE
from gpupool.domain.views import View

API_VERSION = "gpupool/v1"
MAX_DOCUMENTS = 100


class JobBody(JobSpec):
    """A job to queue; with ``array``, a job array: one task (a job of its own) per index
    (the body of ``POST /api/v1/jobs``)."""

    array: ArraySpec | None = Field(
        default=None,
        description="queue one task per index, as sbatch --array does; each task sees "
        "GPUPOOL_ARRAY_ID, GPUPOOL_ARRAY_INDEX and GPUPOOL_ARRAY_TASK_COUNT",
        examples=[{"indexes": "0-999%50"}, {"indexes": [1, 3, 5], "max_running": 2}],
    )

    def job_spec(self) -> JobSpec:
        """The spec of the job (of each task), as validated, without ``array``."""
        values = {name: getattr(self, name) for name in JobSpec.model_fields}
        return JobSpec.model_construct(self.model_fields_set - {"array"}, **values)


class Metadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=200), STORABLE] | None = Field(
        default=None, description="the job's, notebook's or deployment's name"
    )


class Document(BaseModel):
    """One document of a job file; ``spec`` is checked against its kind's body."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["gpupool/v1"] = Field(alias="apiVersion")
    kind: Annotated[str, Field(min_length=1, max_length=50)]
    metadata: Metadata = Field(default_factory=Metadata)
    spec: dict[str, Any] = Field(default_factory=dict)


class ApplyRequest(BaseModel):
    """Documents to submit in one transaction (all or none); ``dry_run``: check them on the
    server as a submit would (teams, quotas, names, dependencies) and submit nothing."""

    model_config = ConfigDict(extra="forbid")

    documents: list[Document] = Field(min_length=1, max_length=MAX_DOCUMENTS)
    dry_run: bool = False


class AppliedView(View):
    """What one document made: its kind, name and id (a job's, notebook's, deployment's;
    an array's tasks in ``job_ids``); ``document``: the document as the server read it,
    fields at their defaults left out (what ``--dry-run`` prints)."""

    kind: str
    name: str | None
    id: int | None = Field(description="null in a dry run: nothing was made")
    job_ids: list[int] = Field(default_factory=list)
    document: dict[str, Any]


class ApplyView(View):
    dry_run: bool
    documents: list[AppliedView]


class KindView(View):
    kind: str
    description: str
    schema_url: str
