"""Request bodies of the REST API, and the shape of its errors.

What the API answers with are the read models of ``gpupool.domain.views``, which services
return; bodies are checked here, at the edge, before any service sees them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gpupool.domain.jobfiles import JobBody
from gpupool.domain.jobs import Role
from gpupool.domain.text import STORABLE, Text
from gpupool.services.identity import Quota


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorOut(BaseModel):
    error: ErrorDetail


class JobSubmit(JobBody):
    """A job to queue; with ``array``, a job array: one task (a job of its own) per index.
    The same body as a job file's Job document (``domain.jobfiles.JobBody``)."""


GpuModelKey = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64), STORABLE
]
GpuAmount = Annotated[float, Field(ge=0, le=1_000_000, allow_inf_nan=False)]


class QuotaIn(Strict):
    """A team's quota. ``guarantee``: GPU model (part of its name, "*": any) -> GPUs."""

    guarantee: dict[GpuModelKey, GpuAmount] = Field(
        default_factory=dict, max_length=64, examples=[{"*": 4, "A100": 2}]
    )
    limit: GpuAmount | None = Field(default=None, description="most GPUs held at once; none")
    weight: float = Field(default=1.0, gt=0, le=1_000_000, allow_inf_nan=False)
    storage: int | None = Field(
        default=None,
        ge=0,
        le=2**62,
        description="the most bytes the team's files may take (outputs, checkpoints, "
        "workspaces, logs, model and code archives); null: none. Left out of a PUT of the "
        "quota, the team keeps the one it has",
        examples=[10 * 1024**3],
    )

    def quota(self) -> Quota:
        """The quota as the quotas service takes it."""
        return Quota(dict(self.guarantee), self.limit, self.weight, self.storage)


class TeamCreate(QuotaIn):
    name: Text = Field(min_length=1, max_length=63)


# checked by the users service (InvalidWeight: code invalid_weight, a message with examples)
UserWeight = Annotated[
    float,
    Field(
        strict=True,
        description="fair share inside a team: a user of weight 2 is owed twice the GPU time "
        "of a user of weight 1; above 0",
        examples=[1, 2, 0.5],
    ),
]


# checked by the users service (UnixUserNotAllowed: code unix_user_not_allowed, says why)
UnixUser = Annotated[
    Annotated[str, Field(max_length=32), STORABLE] | None,
    Field(
        description="the existing Unix account this user's jobs run under when the server "
        "runs as root (not root, not the server's own; several users may share one); null: "
        "none, jobs run under the server's default account. In an update, null clears it and "
        "leaving it out keeps it",
        examples=["ann", None],
    ),
]


Password = Annotated[str, Field(max_length=200), STORABLE]


class UserCreate(Strict):
    name: Text = Field(min_length=1, max_length=63)
    role: Role = Role.MEMBER
    teams: list[Text] = Field(default_factory=list, max_length=100)
    password: Password | None = None
    weight: UserWeight = 1.0
    unix_user: UnixUser = None


class UserUpdate(Strict):
    role: Role | None = None
    teams: list[Text] | None = Field(default=None, max_length=100)
    password: Password | None = None
    disabled: bool | None = None
    weight: UserWeight | None = None
    unix_user: UnixUser = None


class MemberIn(Strict):
    admin: bool | None = Field(
        default=None,
        description="true: a team admin of the team; false: not one; left out: as it was",
    )


class PasswordChange(Strict):
    """A user's change of its own password: ``current`` may be left out while it has none."""

    current: str | None = Field(default=None, max_length=200)
    new: str = Field(max_length=200)


class TokenCreate(Strict):
    name: Text = Field(default="cli", min_length=1, max_length=100)
    user: Text | None = Field(default=None, description="admins may create tokens for others")
    expires_in_days: float | None = Field(default=None, gt=0, le=3650, allow_inf_nan=False)


class NodeDrain(Strict):
    reason: Text | None = Field(
        default=None,
        max_length=500,
        description="why, for the other admins and users (shown on the node)",
        examples=["disk swap on Tuesday"],
    )


class LoginIn(Strict):
    user: Text = Field(min_length=1, max_length=100)
    password: Text = Field(min_length=1, max_length=500)
