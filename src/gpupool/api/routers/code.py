"""Code snapshots: the archive of a job's working directory, uploaded once, named by its hash."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from gpupool.api.access import Rule, allow
from gpupool.api.deps import PlatformDep
from gpupool.domain.code import REF_EXAMPLE, REF_PATTERN
from gpupool.domain.views import CodeLimitsView, CodeView
from gpupool.services import jobs
from gpupool.services.core import Principal

router = APIRouter(prefix="/code", tags=["code"])

Ref = Annotated[
    str,
    Path(
        pattern=REF_PATTERN,
        description="sha256: and the 64 lower-case hex digits of the archive's SHA-256",
        examples=[REF_EXAMPLE],
    ),
]
# The body is read as a stream (never whole in memory), so it is declared here for the docs.
ARCHIVE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a .tar.gz of regular files and directories with relative paths "
        "(its Content-Type is not looked at)",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.get("", response_model=CodeLimitsView)
def show_limits(
    ctx: PlatformDep, _who: Annotated[Principal, allow(Rule.SIGNED_IN)]
) -> CodeLimitsView:
    """What this server takes of one snapshot: a client checks before it uploads."""
    return jobs.code_limits(ctx)


@router.get("/{ref}", response_model=CodeView)
def show_code(
    ref: Ref, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> CodeView:
    """The snapshot if you uploaded it (a client asks before uploading the same bytes
    again); ``404 code_not_found`` otherwise, whether or not someone else did."""
    return jobs.show_code(ctx, who, ref)


@router.put("/{ref}", response_model=CodeView, openapi_extra=ARCHIVE_BODY)
async def upload_code(
    ref: Ref, request: Request, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> CodeView:
    """Store the archive in the body as ``ref`` (its SHA-256 is checked: ``422
    code_hash_mismatch``), for you to run in your teams' jobs (``code`` of a job). Storing it
    again is harmless; someone else's upload of the same bytes is not stored twice. Refused:
    ``413 code_too_large`` over the limits (``GET /code``), ``422 bad_code_archive`` for
    anything but regular files and directories with relative paths (the member is named)."""
    stream = request.stream()
    return await jobs.receive_code(ctx, who, stream, ref, _declared(request))


@router.post("", response_model=CodeView, status_code=201, openapi_extra=ARCHIVE_BODY)
async def create_code(
    request: Request, ctx: PlatformDep, who: Annotated[Principal, allow(Rule.SUBMIT)]
) -> CodeView:
    """As ``PUT /code/{ref}``, with the name worked out by the server (the web UI's
    upload); the answer says it."""
    return await jobs.receive_code(ctx, who, request.stream(), None, _declared(request))


def _declared(request: Request) -> int | None:
    """The body's size as the client announced it (a chunked body announces none)."""
    length = request.headers.get("content-length", "")
    return int(length) if length.isdigit() else None
