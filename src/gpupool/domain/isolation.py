"""How jobs are kept apart on a node: the read model the API, the UI and the banner show."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class IsolationMode(StrEnum):
    SANDBOX = "sandbox"  # every job in a bubblewrap sandbox
    OFF = "off"  # turned off by an admin (GPUPOOL_ISOLATION=off): jobs run unsandboxed
    UNAVAILABLE = "unavailable"  # asked for, but the node cannot make sandboxes: no job runs


class IsolationStatus(BaseModel):
    """``runs_jobs``: False while isolation is asked for and cannot be had. ``identity``: whose
    Unix account a job runs under. ``message``: one sentence for people, with what to do."""

    model_config = ConfigDict(frozen=True)

    mode: IsolationMode
    runs_jobs: bool
    identity: str
    message: str
