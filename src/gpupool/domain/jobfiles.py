"""Job files (`gpupool apply -f`): documents of a kind, sent together, applied all or none.

A document is written as kubectl's are::

    apiVersion: gpupool/v1
    kind: Job                  # Job | Environment | Notebook | Deployment | Dataset | Volume
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

from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from gpupool.domain.arrays import ArraySpec
from gpupool.domain.datasetrefs import SHA256_PATTERN
from gpupool.domain.jobs import JobSpec
from gpupool.domain.text import STORABLE
from gpupool.domain.units import parse_bytes
from gpupool.domain.views import View

API_VERSION = "gpupool/v1"
# Kubeflow's training operators' and Trainer's manifests, taken unchanged (docs/kubeflow.md)
KUBEFLOW_API_VERSIONS = (
    "kubeflow.org/v1",
    "kubeflow.org/v1beta1",  # Katib's Experiment
    "kubeflow.org/v2beta1",
    "trainer.kubeflow.org/v1alpha1",
)
API_VERSIONS = (API_VERSION, *KUBEFLOW_API_VERSIONS)
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


MAX_ID = 2**63 - 1
FROM_IS_LOCAL = (
    "from names a directory of the machine gpupool apply runs on: gpupool apply -f uploads "
    "it and sends its manifest instead; through the API, upload the blobs (PUT "
    "/api/v1/dataset-blobs/SHA256) and give manifest"
)


class DatasetBody(BaseModel):
    """The next version of a dataset (a job file's kind Dataset): the fields of ``POST
    /api/v1/datasets/{name}/versions``, its name in ``metadata.name``.

    In a file, ``from: DIR`` (relative to the file's directory) is what a user writes: the
    CLI hashes it, uploads the blobs the team lacks before it sends the file, and sends
    ``manifest`` in its place. The server never reads a client's directory, so ``from``
    reaching it is refused with a message saying so."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Annotated[str, STORABLE] = Field(max_length=100, description="the dataset's name")
    source: Annotated[str, STORABLE] | None = Field(
        default=None,
        alias="from",
        max_length=4096,
        description="a directory (or a file) to upload, relative to the job file's "
        "directory; gpupool apply -f uploads what the server lacks and sends manifest instead",
    )
    manifest: str | None = Field(
        default=None,
        pattern=SHA256_PATTERN,
        description="an uploaded manifest's SHA-256 (hex) whose blobs the team holds",
    )
    from_job: int | Annotated[str, STORABLE] | None = Field(
        default=None,
        validation_alias=AliasChoices("from_job", "fromJob"),
        description="an ended job (its id, or the name of the team's newest job of that "
        "name) whose outputs the version holds, copied on the server",
    )
    path: Annotated[str, STORABLE] = Field(
        default="", max_length=4096, description="with from_job: a path inside its outputs"
    )
    team: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=100, description="the team (default: your only one)"
    )
    description: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=2000, description="what this version is"
    )

    @field_validator("source")
    @classmethod
    def _not_here(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(FROM_IS_LOCAL)
        return value

    @model_validator(mode="after")
    def _one_source(self) -> DatasetBody:
        if (self.manifest is None) == (self.from_job is None):
            raise ValueError("give one of from (a directory), manifest or from_job")
        if isinstance(self.from_job, int) and not 1 <= self.from_job <= MAX_ID:
            raise ValueError("from_job: a job's id is a positive number")
        if isinstance(self.from_job, str) and not 1 <= len(self.from_job) <= 200:
            raise ValueError("from_job: a job's name is 1 to 200 characters")
        if self.path and self.from_job is None:
            raise ValueError("path goes with from_job")
        return self


class VolumeBody(BaseModel):
    """A volume of the team (a job file's kind Volume): the fields of ``POST
    /api/v1/volumes``, its name in ``metadata.name``; ``size`` (10G, 500GiB) may be written
    for ``size_bytes``. Applied again, it names the volume the team has already."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, STORABLE] = Field(max_length=100, description="the volume's name")
    team: Annotated[str | None, STORABLE] = Field(
        default=None, max_length=100, description="the team (default: your only one)"
    )
    size_bytes: int | None = Field(
        default=None, ge=1, le=2**62, description="its size (the team's quota binds)"
    )
    size: Annotated[int, Field(strict=True)] | Annotated[str, Field(max_length=40)] | None = Field(
        default=None,
        exclude=True,
        description="its size as written, 10G or 500GiB: read as size_bytes",
    )

    @model_validator(mode="after")
    def _size(self) -> VolumeBody:
        if self.size is None:
            return self
        if self.size_bytes is not None:
            raise ValueError("give size or size_bytes, not both")
        try:
            size_bytes = parse_bytes(self.size)
        except ValueError as error:
            raise ValueError(f"size: {error} (e.g. 10G, 500GiB)") from None
        if not 1 <= size_bytes <= 2**62:
            raise ValueError("size: give 1 byte or more, at most 4 EiB (e.g. 10G)")
        self.size_bytes, self.size = size_bytes, None
        return self


class Metadata(BaseModel):
    """A document's metadata: its ``name``. A Kubeflow manifest's metadata holds more
    (namespace, labels: kept as extra fields, which the translation reads or names as
    ignored); a gpupool/v1 document's holds nothing else."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, Field(min_length=1, max_length=200), STORABLE] | None = Field(
        default=None, description="the job's, notebook's or deployment's name"
    )


class Document(BaseModel):
    """One document of a job file; ``spec`` is checked against its kind's body, or, for a
    Kubeflow manifest (``KUBEFLOW_API_VERSIONS``), translated into a gpupool Job."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Annotated[str, Field(max_length=100)] = Field(
        alias="apiVersion",
        description=f"{API_VERSION}, or a Kubeflow manifest's (docs/kubeflow.md)",
        examples=[API_VERSION, "kubeflow.org/v1"],
    )
    kind: Annotated[str, Field(min_length=1, max_length=50)]
    metadata: Metadata = Field(default_factory=Metadata)
    spec: dict[str, Any] = Field(default_factory=dict)

    @field_validator("api_version")
    @classmethod
    def _known_api_version(cls, value: str) -> str:
        if value not in API_VERSIONS:
            raise ValueError(
                f"apiVersion '{value[:100]}' is not one gpupool reads: use {API_VERSION}, or a "
                f"Kubeflow manifest's ({', '.join(KUBEFLOW_API_VERSIONS)})"
            )
        return value

    @property
    def is_kubeflow(self) -> bool:
        """A Kubeflow manifest, translated on the server into a gpupool Job."""
        return self.api_version in KUBEFLOW_API_VERSIONS


class ApplyRequest(BaseModel):
    """Documents to submit in one transaction (all or none); ``dry_run``: check them on the
    server as a submit would (teams, quotas, names, dependencies) and submit nothing."""

    model_config = ConfigDict(extra="forbid")

    documents: list[Document] = Field(min_length=1, max_length=MAX_DOCUMENTS)
    dry_run: bool = False
    ignore_image: bool = Field(
        default=False,
        description="a Kubeflow manifest's container image that is no gpupool image is "
        "left out (a notice says so): the job runs on the nodes' own system",
    )


class Notice(View):
    """A field of a Kubeflow manifest that gpupool does not honour, and why."""

    field: str = Field(description="where it is written: spec.runPolicy.ttlSecondsAfterFinished")
    message: str


class AppliedView(View):
    """What one document made: its kind, name and id (a job's, notebook's, deployment's;
    an array's tasks in ``job_ids``); ``document``: the document as the server read it,
    fields at their defaults left out (what ``--dry-run`` prints)."""

    kind: str
    name: str | None
    id: int | None = Field(description="null in a dry run: nothing was made")
    job_ids: list[int] = Field(default_factory=list)
    document: dict[str, Any]
    translated_from: str | None = Field(
        default=None,
        description="a Kubeflow manifest's apiVersion and kind (kubeflow.org/v1 PyTorchJob), "
        "which the server translated into this document",
    )
    notices: list[Notice] = Field(
        default_factory=list,
        description="the manifest's fields that gpupool does not honour, each with why "
        "(recorded as the job's event KubeflowFieldIgnored)",
    )


class ApplyView(View):
    dry_run: bool
    documents: list[AppliedView]


class KindView(View):
    kind: str
    description: str
    schema_url: str
