"""Job dependencies: a job that starts only once other jobs of its team have ended.

A dependency names a job (its id, or its name: the newest job of that name in the job's
team, resolved to an id at submit) and a condition, as Slurm's ``--dependency`` does:

- ``afterok``: the job it waits for succeeded (the default);
- ``afterany``: it ended, however;
- ``afternotok``: it ended and did not succeed (failed, cancelled or lost).

Written as an object (``{"job": 12, "condition": "afterany"}``) or as the short string form
``"afterany:12"``, ``"12"``, ``"prep"`` or ``"afterok:prep"``.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpupool.domain.text import STORABLE

MAX_DEPENDENCIES = 100
MAX_JOB_ID = 2**63 - 1
ID = re.compile(r"^[0-9]+$")


class Condition(StrEnum):
    AFTER_OK = "afterok"
    AFTER_ANY = "afterany"
    AFTER_NOT_OK = "afternotok"


class Outcome(StrEnum):
    """What a dependency's condition is, given where the job it names stands."""

    WAITING = "waiting"  # that job has not ended yet
    MET = "met"
    NEVER = "never"  # that job ended so that the condition can never hold


class Dependency(BaseModel):
    """One job this job waits for, and how that job must end (see the module)."""

    model_config = ConfigDict(extra="forbid")

    job: int | Annotated[str, Field(min_length=1, max_length=200), STORABLE] = Field(
        description="the job's id, or its name (the newest job of that name in this job's "
        "team; recorded as its id at submit)",
        examples=[12, "prep"],
    )
    condition: Condition = Field(
        default=Condition.AFTER_OK,
        description="afterok: it succeeded; afterany: it ended; afternotok: it ended and did "
        "not succeed",
    )

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        """``"afterok:12"``, ``"12"``, ``"prep"``, ``12`` as the object they stand for; a
        name made of digits only is read as an id."""
        if isinstance(value, bool):
            raise ValueError("a dependency is a job id, a job name, or 'afterok:ID'")
        if isinstance(value, int):
            return {"job": value}
        if isinstance(value, str):
            return parse_short(value)
        if isinstance(value, dict) and isinstance(value.get("job"), str):
            job = value["job"].strip()
            return {**value, "job": int(job) if ID.match(job) else job}
        return value

    @model_validator(mode="after")
    def _valid_id(self) -> Dependency:
        if isinstance(self.job, int) and not 1 <= self.job <= MAX_JOB_ID:
            raise ValueError(f"job id {self.job} is not a job's id: ids are 1 and up")
        return self

    @property
    def short(self) -> str:
        """The short string form (``afterok:12``)."""
        return f"{self.condition.value}:{self.job}"


def parse_short(text: str) -> dict[str, Any]:
    """``"afterany:12"`` -> ``{"job": 12, "condition": "afterany"}``; without a condition,
    afterok. Refuses an empty job and an unknown condition before a colon."""
    text = text.strip()
    head, colon, rest = text.partition(":")
    condition = Condition.AFTER_OK.value
    if colon and head.strip().lower() in {c.value for c in Condition}:
        condition, text = head.strip().lower(), rest.strip()
    elif colon and head.strip().lower().startswith("after"):
        raise ValueError(
            f"'{head}' is not a dependency condition: use afterok, afterany or afternotok "
            "(as in afterok:12)"
        )
    if not text:
        raise ValueError("a dependency names a job: its id or its name, as in afterok:12")
    return {"job": int(text) if ID.match(text) else text, "condition": condition}


def outcome(condition: Condition, status: str, final: bool) -> Outcome:
    """Whether ``condition`` holds of a job of ``status`` (``final``: it has ended)."""
    if not final:
        return Outcome.WAITING
    succeeded = status == "succeeded"
    if condition is Condition.AFTER_ANY:
        return Outcome.MET
    if condition is Condition.AFTER_OK:
        return Outcome.MET if succeeded else Outcome.NEVER
    return Outcome.NEVER if succeeded else Outcome.MET


def label(job_id: int, name: str | None) -> str:
    """How a message names a job: ``job 12 (prep)``, or ``job 12`` without a name."""
    return f"job {job_id} ({name})" if name else f"job {job_id}"


WAITS_FOR = {
    Condition.AFTER_OK: "to succeed",
    Condition.AFTER_ANY: "to end",
    Condition.AFTER_NOT_OK: "to end without succeeding",
}


def waiting_message(condition: Condition, job_id: int, name: str | None) -> str:
    """What a job waiting on ``job_id`` says: ``waits for job 12 (prep) to succeed``."""
    return f"waits for {label(job_id, name)} {WAITS_FOR[condition]}"


def never_message(condition: Condition, job_id: int, name: str | None, status: str) -> str:
    """Why a job was cancelled: the job it waited for ended so that it never can start."""
    wanted = {
        Condition.AFTER_OK: "was to start only after it succeeded",
        Condition.AFTER_NOT_OK: "was to start only if it did not succeed",
        Condition.AFTER_ANY: "was to start after it ended",
    }[condition]
    return f"{label(job_id, name)} ended {status}, and this job {wanted} ({condition.value})"
