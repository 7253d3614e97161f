"""Applying a job file: every document checked against its kind's body, then all made in
one transaction (all or none); a dry run makes them too, then rolls the transaction back,
so that it refuses exactly what the real one would (teams, quotas, names, dependencies).

Every error names the document it is about (``document 2 (Job train): ...``) and carries its
fields as ``documents.<index>.spec.<field>`` (``documents.<index>.kind`` ...), which the CLI
maps back to the file's line and column.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import IntegrityError

from gpupool.domain.jobfiles import API_VERSION, AppliedView, ApplyRequest, ApplyView, Document
from gpupool.errors import Conflict, GpupoolError, InvalidRequest, invalid_with_code
from gpupool.services import jobs, kubeflow
from gpupool.services.core import Principal
from gpupool.services.jobfiles._kinds import KINDS, Kind, Made, Making, kind_of
from gpupool.services.jobfiles._kubeflow import (
    RUNTIME,
    as_read,
    manifest,
    record_notices,
    translate_documents,
)
from gpupool.services.jobfiles._ports import Applies


class _DryRun(Exception):
    """Raised inside the transaction of a dry run, so that nothing it made is kept."""


def apply(ctx: Applies, who: Principal, request: ApplyRequest) -> ApplyView:
    """Make every document of ``request`` in one transaction, or check them and make
    nothing (``dry_run``); what each made (nothing, in a dry run) and how it was read."""
    who.require_member()
    read, translated = read_file(ctx, who, request)
    check_references(read)
    making = Making(
        who,
        ctx.clock.now(),
        ctx.loop.recent_nodes(),
        jobs.JobLimits.of(ctx.settings),
        ctx.settings.max_array_tasks,
    )
    prepared = []  # the slow steps first, with no transaction open (an environment's resolve)
    for index, (kind, body) in enumerate(read):
        with about(index, _kind(index, kind, translated), _name(kind, body)):
            ready = body if kind.prepare is None else kind.prepare(ctx, who, body, request.dry_run)
            prepared.append(ready)
    made: list[Made] = []
    try:
        with ctx.db.session() as session:
            for index, ((kind, body), ready) in enumerate(zip(read, prepared, strict=True)):
                with about(index, _kind(index, kind, translated), _name(kind, body)):
                    made.append(kind.make(session, ready, making))
                if index in translated:
                    notices = translated[index].notices
                    record_notices(session, made[-1], notices, making.now)
            if request.dry_run:
                raise _DryRun
    except _DryRun:
        pass
    except IntegrityError as error:  # a deployment of the same name made at the same moment
        raise Conflict(
            "something of the same name was made at the same moment: apply the file again"
        ) from error
    if not request.dry_run:
        ctx.loop.wake()
        for (kind, _body), result in zip(read, made, strict=True):
            if kind.after is not None:
                kind.after(ctx, result)
    return ApplyView(
        dry_run=request.dry_run,
        documents=[
            _view(index, kind, body, result, request, translated.get(index))
            for index, ((kind, body), result) in enumerate(zip(read, made, strict=True))
        ],
    )


def read_file(
    ctx: Applies, who: Principal, request: ApplyRequest
) -> tuple[list[tuple[Kind, BaseModel]], dict[int, kubeflow.Translated]]:
    """Every document as its kind and body: gpupool/v1 ones read as they are, then Kubeflow
    manifests translated into Jobs (``_kubeflow``), by index."""
    documents = request.documents
    own = {i: read_document(i, doc) for i, doc in enumerate(documents) if not doc.is_kubeflow}
    storage: dict[str, kubeflow.Storage] = {
        _name(kind, body) or "": "volume" if kind.name == "Volume" else "dataset"
        for kind, body in own.values()
        if kind.name in ("Volume", "Dataset")
    }
    translated = translate_documents(ctx, who, request, storage)
    read = [own[i] if i in own else as_read(translated[i]) for i in range(len(documents))]
    return read, translated


def _view(
    index: int,
    kind: Kind,
    body: BaseModel,
    result: Made,
    request: ApplyRequest,
    translated: kubeflow.Translated | None,
) -> AppliedView:
    document = normalised(kind, body)
    if translated is not None and kind is RUNTIME:  # a runtime: shown as written
        document = manifest(request.documents[index])
    source = request.documents[index]
    return AppliedView(
        kind=kind.name if kind is not RUNTIME else source.kind,
        name=_name(kind, body),
        id=None if request.dry_run else result.id,
        job_ids=[] if request.dry_run else list(result.job_ids),
        document=document,
        translated_from=f"{source.api_version} {source.kind}" if translated else None,
        notices=list(translated.notices) if translated else [],
    )


def _kind(index: int, kind: Kind, translated: Mapping[int, kubeflow.Translated]) -> str:
    """The kind a document is labelled by in errors: as it is written."""
    return translated[index].kind if index in translated else kind.name


def read_document(index: int, doc: Document) -> tuple[Kind, BaseModel]:
    """The document's kind and its ``spec`` as that kind's body (``metadata.name`` as its
    name); InvalidRequest naming the document and its fields."""
    _plain_metadata(index, doc)
    kind = kind_of(doc.kind)
    if kind is None:
        known = ", ".join(KINDS)
        raise InvalidRequest(
            f"document {index + 1}: kind '{doc.kind}' is not one gpupool knows: use one of "
            f"{known} (GET /api/v1/schemas/ lists them)",
            fields=[{"field": f"documents.{index}.kind", "message": f"one of {known}"}],
        )
    spec = dict(doc.spec)
    name = doc.metadata.name
    if name is not None:
        given = spec.get(kind.name_field)
        if given is not None and given != name:
            raise InvalidRequest(
                f"document {index + 1} ({kind.name} {name}): metadata.name and "
                f"spec.{kind.name_field} differ ('{given}'): give the name once, in metadata",
                fields=[{"field": f"documents.{index}.metadata.name", "message": "differs"}],
            )
        spec[kind.name_field] = name
    try:
        return kind, kind.body.model_validate(spec)
    except ValidationError as error:
        raise invalid(index, kind.name, name, error) from None


def _plain_metadata(index: int, doc: Document) -> None:
    """A gpupool/v1 document's metadata holds its name alone."""
    extra = sorted(doc.metadata.model_extra or {})
    if extra:
        raise InvalidRequest(
            f"document {index + 1} ({doc.kind}): metadata.{extra[0]}: a {API_VERSION} "
            "document's metadata holds only its name",
            fields=[{"field": f"documents.{index}.metadata.{extra[0]}", "message": "not known"}],
        )


def check_references(read: Sequence[tuple[Kind, BaseModel]]) -> None:
    """A Job's ``depends_on`` may name a Job of the file only if that one comes first, and
    its ``datasets`` and ``volumes`` a Dataset or a Volume of the file likewise; a Dataset
    cannot be made from a Job of the same file (it has not run yet)."""
    names = [
        _name(kind, body) if kind.name == "Job" else None for kind, body in read
    ]  # fmt: skip
    for index, (kind, body) in enumerate(read):
        _check_from_job(index, kind, body, names)
        _check_made_later(index, kind, body, read)
        for position, dep in enumerate(getattr(body, "depends_on", None) or []):
            if not isinstance(dep.job, str) or dep.job in names[:index]:
                continue
            if dep.job in names[index:]:
                raise InvalidRequest(
                    f"document {index + 1} ({kind.name} {_name(kind, body)}): it depends on "
                    f"'{dep.job}', a Job that comes later in the file: put '{dep.job}' "
                    "before it",
                    fields=[
                        {
                            "field": f"documents.{index}.spec.depends_on.{position}",
                            "message": "comes later in the file",
                        }
                    ],
                )


def _check_from_job(index: int, kind: Kind, body: BaseModel, jobs: list[str | None]) -> None:
    source = getattr(body, "from_job", None) if kind.name == "Dataset" else None
    if isinstance(source, str) and source in jobs:
        raise InvalidRequest(
            f"document {index + 1} (Dataset {_name(kind, body)}): from_job '{source}' is a Job "
            "of this file, which has not run yet: make the dataset from it once it has ended "
            "(another apply, or gpupool dataset create --from-job)",
            fields=[{"field": f"documents.{index}.spec.from_job", "message": "a Job of this file"}],
        )


# a Job's field -> the kind of the documents its entries name
_USES = {"datasets": "Dataset", "volumes": "Volume"}


def _check_made_later(
    index: int, kind: Kind, body: BaseModel, read: Sequence[tuple[Kind, BaseModel]]
) -> None:
    if kind.name != "Job":
        return
    for field, made in _USES.items():
        later = {_name(k, b) for k, b in read[index + 1 :] if k.name == made}
        for position, use in enumerate(getattr(body, field, None) or []):
            if use.name in later:
                raise InvalidRequest(
                    f"document {index + 1} (Job {_name(kind, body)}): it uses the {made} "
                    f"'{use.name}', which comes later in the file: put '{use.name}' before it",
                    fields=[
                        {
                            "field": f"documents.{index}.spec.{field}.{position}",
                            "message": "comes later in the file",
                        }
                    ],
                )


@contextmanager
def about(index: int, kind: str, name: str | None) -> Iterator[None]:
    """Errors raised inside say which document they are about, and where in it."""
    try:
        yield
    except GpupoolError as error:
        error.message = f"{_label(index, kind, name)}: {error.message}"
        error.args = (error.message,)
        fields = error.details.get("fields")
        if isinstance(fields, list):
            error.details["fields"] = [
                {**f, "field": f"documents.{index}.spec.{f.get('field', '')}".rstrip(".")}
                for f in fields
            ]
        raise


def invalid(index: int, kind: str, name: str | None, error: ValidationError) -> InvalidRequest:
    """A body's validation error as the API's 422: its first problem in the message, every
    problem as a field under ``documents.<index>.spec``; a problem of a type that is a code
    of its own (gpu_type_without_gpus ...) keeps that code."""
    fields = []
    for problem in error.errors():
        location = ".".join(str(part) for part in problem.get("loc", ()))
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        field = f"documents.{index}.spec" + (f".{location}" if location else "")
        fields.append({"field": field, "message": message, "type": problem.get("type", "")})
    first = fields[0]
    where = first["field"].removeprefix(f"documents.{index}.")
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    text = f"{_label(index, kind, name)}: {where}: {first['message']}{more}"
    own = invalid_with_code(first["type"])
    return own(text, fields=fields)


def normalised(kind: Kind, body: BaseModel) -> dict[str, Any]:
    """The document as the server read it: its fields at their defaults left out, its name
    in metadata (what ``--dry-run`` prints, and what applying it again sends)."""
    spec = body.model_dump(mode="json", exclude_defaults=True)
    name = spec.pop(kind.name_field, None)
    document: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind.name}
    if name is not None:
        document["metadata"] = {"name": name}
    document["spec"] = spec
    return document


def _name(kind: Kind, body: BaseModel) -> str | None:
    return getattr(body, kind.name_field, None)


def _label(index: int, kind: str, name: str | None) -> str:
    return f"document {index + 1} ({kind}{f' {name}' if name else ''})"
