"""The model registry: named models of a team, each a list of numbered versions.

A version is what a finished job left in its outputs (``GPUPOOL_OUTPUT_DIR``), copied into
the model store: its files (each with its size and SHA-256), kept as one content-addressed
archive (``sha256:<hex>``, in the format of code snapshots, ``gpupool.domain.code``, so a
node unpacks it with ``gpupool.executors.code.unpack_once``), and what made it: the source
job, its spec as submitted, and its final metrics. This module holds the rules and the read
models; it does no I/O (``gpupool.services.models`` does).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from gpupool.domain.views import View

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
NAME_RULE = (
    "a model's name is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or "
    "a digit (no ':', which separates a version: NAME:3)"
)
_NAME = re.compile(NAME_PATTERN)


def is_model_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.match(value) is not None


def source_path(value: str | None) -> str:
    """The sub path of a job's outputs a version is made of, normalised ('' for the whole
    outputs); ValueError saying what is wrong: an absolute path, a '..', a NUL."""
    if not value:
        return ""
    if "\0" in value:
        raise ValueError("a path cannot hold a NUL character")
    if value.startswith("/"):
        raise ValueError("give a path relative to the job's outputs, not an absolute one")
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError("a path inside the job's outputs cannot hold '..'")
    return "/".join(parts)


def parse_reference(value: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:VERSION`` as a (name, version) pair (None: the latest);
    ValueError saying what is wrong."""
    name, sep, version = value.partition(":")
    if not is_model_name(name):
        raise ValueError(f"'{name}' is not a model's name: {NAME_RULE}")
    if not sep:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise ValueError(f"'{version}' is not a version: versions are numbered 1, 2, 3 ...")
    return name, int(version)


class ModelFileView(View):
    """A file of a model version: its path in the version, its size and its SHA-256."""

    path: str
    size: int
    sha256: str


class ModelVersionView(View):
    """One version of a model, with what made it and the files it holds."""

    name: str
    team: str
    version: int
    description: str | None = None
    archive: str = Field(description="the version's files as one archive: sha256:<hex>")
    archive_bytes: int = Field(description="the archive's size")
    # where the archive lies on the server (executors read it); never shown to API users
    archive_path: str = Field(exclude=True)
    size_bytes: int = Field(description="the bytes of its files")
    files: list[ModelFileView]
    source_job_id: int | None = Field(description="the job it was registered from")
    source_path: str = Field(description="the sub path of the job's outputs ('' for all)")
    spec: dict[str, Any] = Field(description="the source job's spec, as submitted")
    metrics: dict[str, float] = Field(description="the source job's final metrics")
    created_at: float
    created_by: str


class ModelVersionSummary(View):
    """A version as a model's list of versions shows it."""

    version: int
    description: str | None = None
    archive: str
    size_bytes: int
    file_count: int
    source_job_id: int | None
    metrics: dict[str, float]
    created_at: float
    created_by: str


class ModelView(View):
    """A model of a team: its latest version and how many it has."""

    name: str
    team: str
    latest_version: int
    version_count: int
    created_at: float
    updated_at: float = Field(description="when its latest version was registered")


class ModelDetailView(ModelView):
    """A model with its versions, newest first."""

    versions: list[ModelVersionSummary]
