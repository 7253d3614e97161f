"""The base of every read model (``View``), apart from ``domain.views`` so that a
capability's own read models (``domain.experiments``) and ``domain.views`` may both use it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class View(BaseModel):
    """A read model: frozen, and built from what a service read."""

    model_config = ConfigDict(frozen=True)
