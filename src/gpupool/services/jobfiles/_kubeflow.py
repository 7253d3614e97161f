"""A job file's Kubeflow manifests (docs/kubeflow.md), translated by ``services.kubeflow``
into the Jobs they run as, before the file's transaction: what the translation looks up
(the team's images, volumes and datasets, the site's priority classes) is read here in a
read-only session, as the submit will check it again. A (Cluster)TrainingRuntime makes
nothing: it is read for the file's TrainJobs. A translated Job's notices are recorded as
its event ``KubeflowFieldIgnored`` once it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from gpupool.domain.datasetrefs import DatasetUse, VolumeUse, is_dataset_name
from gpupool.domain.jobfiles import ApplyRequest, Document, Notice
from gpupool.domain.jobs import Reason
from gpupool.domain.text import escape_unstorable
from gpupool.errors import GpupoolError, KubeflowInvalid, NotFound
from gpupool.services import datasets, identity, images, jobs, kubeflow
from gpupool.services.core import Principal
from gpupool.services.jobfiles._kinds import KINDS, Kind, Made, Making
from gpupool.services.jobfiles._ports import Applies
from gpupool.store.models import TeamModel

IGNORED_SHOWN = 20  # notices named in the job's event; the rest counted


class Defined(BaseModel):
    """A (Cluster)TrainingRuntime of the file, by name: read for its TrainJobs."""

    name: str | None = None


def _defined(_session: Session, body: Defined, _making: Making) -> Made:
    return Made(None, body.name)


RUNTIME = Kind(
    "TrainingRuntime",
    "a Kubeflow Trainer runtime that the file's TrainJobs use; it makes nothing",
    Defined,
    _defined,
)


def translate_documents(
    ctx: Applies, who: Principal, request: ApplyRequest, storage: Mapping[str, kubeflow.Storage]
) -> dict[int, kubeflow.Translated]:
    """Each Kubeflow manifest of ``request``, by index, translated; ``storage``: the
    volumes and datasets the file's own documents make, by name."""
    manifests = {i: manifest(doc) for i, doc in enumerate(request.documents) if doc.is_kubeflow}
    if not manifests:
        return {}
    runtimes: dict[tuple[str, str], kubeflow.Runtime] = {}
    for index, data in manifests.items():
        with labelled(index, data):
            runtime = kubeflow.runtime_of(data)
            if runtime is not None and (runtime.kind, runtime.name) in runtimes:
                raise KubeflowInvalid(
                    f"metadata.name: the file defines {runtime.kind} {runtime.name} twice: "
                    "give each runtime its own name",
                    fields=[{"field": "metadata.name", "message": "defined twice"}],
                )
        if runtime is not None:
            runtimes[(runtime.kind, runtime.name)] = runtime
    with ctx.db.reader() as session:
        lookups = FileLookups(session, who, ctx.settings.priority_classes, storage)
        translated = {}
        for index, data in manifests.items():
            with labelled(index, data):
                translated[index] = kubeflow.translate(
                    data, runtimes, lookups, request.ignore_image
                )
        return translated


def as_read(translated: kubeflow.Translated) -> tuple[Kind, BaseModel]:
    """What the file's steps make of a translated manifest: a Job, an Experiment (Katib's),
    or nothing."""
    if translated.experiment is not None:
        return KINDS["Experiment"], translated.experiment
    if translated.job is None:
        return RUNTIME, Defined(name=translated.name)
    return KINDS["Job"], translated.job


def manifest(doc: Document) -> dict[str, Any]:
    """The manifest as written (its metadata's every field), as plain data: a key or string
    of it that cannot be stored is refused when it is translated (``kubeflow.translate``)."""
    name = {"name": doc.metadata.name} if doc.metadata.name is not None else {}
    metadata = name | dict(doc.metadata.model_extra or {})
    data: dict[str, Any] = {"apiVersion": doc.api_version, "kind": doc.kind}
    return data | ({"metadata": metadata} if metadata else {}) | {"spec": doc.spec}


def record_notices(session: Session, made: Made, notices: Sequence[Notice], now: float) -> None:
    """The job's event naming the manifest's fields that gpupool does not honour."""
    if not notices or not made.job_ids:
        return
    shown = "; ".join(f"{n.field} ({n.message})" for n in notices[:IGNORED_SHOWN])
    more = len(notices) - IGNORED_SHOWN
    message = f"fields of the manifest not honoured: {shown}" + (
        f"; and {more} more (gpupool apply --dry-run lists them)" if more > 0 else ""
    )
    for job_id in made.job_ids:
        jobs.record(session, job_id, now, Reason.KUBEFLOW_FIELD_IGNORED, message)


@contextmanager
def labelled(index: int, data: Mapping[str, Any]) -> Iterator[None]:
    """Errors raised inside name the document (``document 2 (PyTorchJob train)``) and carry
    their fields under ``documents.<index>.`` (the manifest's own paths)."""
    try:
        yield
    except GpupoolError as error:
        name = (data.get("metadata") or {}).get("name")
        kind = escape_unstorable(str(data.get("kind")))
        label = f"document {index + 1} ({kind}{f' {name}' if name else ''})"
        error.message = f"{label}: {error.message}"
        error.args = (error.message,)
        fields = error.details.get("fields")
        if isinstance(fields, list):
            error.details["fields"] = [
                {**f, "field": f"documents.{index}.{f.get('field', '')}".rstrip(".")}
                for f in fields
            ]
        raise


class FileLookups:
    """``kubeflow.Lookups`` in a read-only ``session``: images, volumes and datasets of the
    team ``who`` submits to (the manifest's, refused as a submit to it would be, else their
    only one), and those the file's own documents make (``storage``)."""

    def __init__(
        self,
        session: Session,
        who: Principal,
        priority_classes: Mapping[str, int],
        storage: Mapping[str, kubeflow.Storage],
    ) -> None:
        self.session, self.who = session, who
        self._classes, self._storage = priority_classes, storage
        self._teams: dict[str | None, TeamModel] = {}

    @property
    def priority_classes(self) -> Mapping[str, int]:
        return self._classes

    def image(self, reference: str, team: str | None) -> kubeflow.ImageFacts | None:
        found = images.usable_image(self.session, reference, self._team(team).id)
        if found is None:
            return None
        return kubeflow.ImageFacts(
            found.name, tuple(found.entrypoint), tuple(found.cmd), found.workdir
        )

    def storage(self, name: str, team: str | None) -> kubeflow.Storage | None:
        if name in self._storage:
            return self._storage[name]
        if not is_dataset_name(name):
            return None
        row = self._team(team)
        use = VolumeUse(name=name, mount="/volume")
        if _found(lambda: datasets.resolve_volumes(self.session, [use], row.id, row.name)):
            return "volume"
        read = DatasetUse(name=name)
        if _found(lambda: datasets.resolve_uses(self.session, [read], row.id, row.name)):
            return "dataset"
        return None

    def _team(self, name: str | None) -> TeamModel:
        if name not in self._teams:
            self._teams[name] = identity.acting_team(self.session, self.who, name, "submit to")
        return self._teams[name]


def _found(resolve: Callable[[], object]) -> bool:
    try:
        resolve()
    except NotFound:
        return False
    return True
