"""One error root. Client errors carry a stable code and a message that says what to do."""

from __future__ import annotations

from typing import Any


class GpupoolError(Exception):
    """Something went wrong in gpupool."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str | None = None, **details: Any) -> None:
        super().__init__(message or self.__doc__ or self.code)
        self.message = message or (self.__doc__ or self.code).strip()
        self.details = details


class ClientError(GpupoolError):
    """The request cannot be done as asked."""

    status = 400
    code = "bad_request"


class InvalidRequest(ClientError):
    """The request is not valid: fix the fields named in the details."""

    status = 422
    code = "invalid_request"


class InvalidWeight(InvalidRequest):
    """A user's weight is a number above 0: 1 is the default, 2 is owed twice the GPU time."""

    code = "invalid_weight"


class UnixUserNotAllowed(InvalidRequest):
    """Jobs cannot run under this Unix account: map the user to an existing, unprivileged one."""

    code = "unix_user_not_allowed"


class Unauthenticated(ClientError):
    """Log in first: send 'Authorization: Bearer <token>' or sign in to the web UI."""

    status = 401
    code = "unauthenticated"


class Forbidden(ClientError):
    """Your role does not allow this; ask an admin of the pool."""

    status = 403
    code = "forbidden"


class PriorityNotAllowed(Forbidden):
    """Your role does not allow this priority; submit with a lower one."""

    code = "priority_not_allowed"


class NotFound(ClientError):
    """No such resource, or not one you can see."""

    status = 404
    code = "not_found"


class Conflict(ClientError):
    """The resource is not in a state that allows this."""

    status = 409
    code = "conflict"


class GuaranteesExceedPool(Conflict):
    """The teams' guarantees would add up to more GPUs than the pool has."""

    code = "guarantees_exceed_pool"


class LimitBelowGuarantee(InvalidRequest):
    """A team's limit must be at least its guarantee."""

    code = "limit_below_guarantee"


class Unsatisfiable(ClientError):
    """No node of the pool can ever run this request: ask for less."""

    status = 422
    code = "unsatisfiable"


class UnknownTeam(ClientError):
    """No such team: list teams with 'gpupool teams'."""

    status = 422
    code = "unknown_team"


class CsrfFailed(ClientError):
    """The CSRF token is missing or wrong: reload the page and try again."""

    status = 403
    code = "csrf_failed"


class PayloadTooLarge(ClientError):
    """The request body is too large."""

    status = 413
    code = "payload_too_large"


class WorkdirNotAllowed(InvalidRequest):
    """This working directory cannot be used: give an absolute path of your own."""

    code = "workdir_not_allowed"


class StorageFull(GpupoolError):
    """The server's disk is full, so nothing was recorded: free space where gpupool keeps
    its data, then try again."""

    status = 507
    code = "storage_full"


class SchemaMismatch(GpupoolError):
    """The database schema does not match this gpupool version."""

    code = "schema_mismatch"
