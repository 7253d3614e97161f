"""Job files: apply documents of several kinds in one transaction (`gpupool apply -f`), and
the JSON schema of each kind for editors."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, status

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.jobfiles import ApplyRequest, ApplyView, KindView
from gpupool.services import jobfiles
from gpupool.services.core import Principal

router = APIRouter(tags=["job files"])

KindName = Annotated[str, Path(max_length=50, description="a kind: Job, Dataset, Volume ...")]


@router.post("/apply", response_model=ApplyView, status_code=status.HTTP_200_OK)
def apply(
    body: ApplyRequest, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> ApplyView:
    """Make every document (a Job, an Environment, a Dataset, a Volume, a Notebook, a
    Deployment) in one transaction: all of them or, when one is refused, none; with
    ``dry_run``, check them as a submit would and make nothing. Errors name the document and
    carry its fields as documents.N.spec.FIELD."""
    return jobfiles.apply(ctx, who, body)


@router.get("/schemas/", response_model=list[KindView])
def kinds(who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> list[KindView]:
    """The kinds a job file may hold, each with where its JSON schema is."""
    return jobfiles.kinds()


@router.get("/schemas/{kind}", response_model=dict[str, Any])
def schema(kind: KindName, who: Annotated[Principal, allow(Rule.SIGNED_IN)]) -> dict[str, Any]:
    """The JSON schema of a document of this kind (for an editor's YAML checks)."""
    return jobfiles.schema(kind)
