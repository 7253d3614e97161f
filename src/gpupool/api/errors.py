"""One mapping from errors to HTTP: {"error": {"code", "message", "details"}}; never a bare 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gpupool.errors import GpupoolError

log = logging.getLogger(__name__)

HTTP_CODES = {
    404: ("not_found", "no such resource: see /api/v1/docs for the API"),
    405: ("method_not_allowed", "this method is not allowed here: see /api/v1/docs"),
    413: ("payload_too_large", "the request body is too large"),
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def install(app: FastAPI) -> None:
    app.add_exception_handler(GpupoolError, _gpupool_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


async def _gpupool_error(request: Request, error: GpupoolError) -> JSONResponse:
    if error.status >= 500:
        log.error("%s %s failed: %s", request.method, request.url.path, error)
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    body = error_body(error.code, error.message, error.details)
    return JSONResponse(body, status_code=error.status, headers=headers)


async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
    fields = [_field(e) for e in error.errors()]
    first = fields[0] if fields else {"field": "body", "message": "invalid"}
    message = f"{first['field']}: {first['message']}" + (
        f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    )
    return JSONResponse(error_body("invalid_request", message, {"fields": fields}), status_code=422)


async def _http_error(_request: Request, error: HTTPException) -> JSONResponse:
    code, message = HTTP_CODES.get(error.status_code, ("http_error", str(error.detail)))
    return JSONResponse(
        error_body(code, message), status_code=error.status_code, headers=error.headers
    )


async def _unexpected(request: Request, error: Exception) -> JSONResponse:
    log.exception("unexpected error in %s %s", request.method, request.url.path)
    return JSONResponse(
        error_body("internal_error", "the server failed; the operator's log has the details"),
        status_code=500,
    )


def _field(error: dict[str, Any]) -> dict[str, str]:
    location = [str(part) for part in error.get("loc", ()) if part not in ("body",)]
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return {
        "field": ".".join(location) or "body",
        "message": message,
        "type": error.get("type", ""),
    }
