"""Python environments: a team's named, locked sets of packages that jobs run with.

An environment (``gpupool env create NAME``) has versions; each is a lock (every package
pinned with its hashes, as ``uv pip compile --generate-hashes`` writes it), the Python version
it is for and the platform it was resolved for. Its id is the SHA-256 of those three
(``env_id``), so the same lock is the same environment on every node and for every team, built
once per node. A job names ``NAME`` (the newest version, resolved when it is submitted and
recorded on the job) or ``NAME@ID`` (an id, or its first 8 or more hex digits). An admin may
also register a prefix that exists on the nodes already (a conda env, a module tree): no
lock, its id the digest of its path.

This module holds the rules and the API's bodies and views; it does no I/O.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpupool.domain.text import STORABLE

ID_PATTERN = r"^sha256:[0-9a-f]{64}$"
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
NAME_RULE = (
    "1 to 63 characters: lower-case letters, digits, '.', '_' and '-', starting with a letter "
    "or a digit"
)
PYTHON_PATTERN = r"^3\.\d{1,2}(\.\d{1,3})?$"
SHORT_ID = 12  # hex digits shown for an id
MIN_ID_PREFIX = 8  # hex digits a NAME@ID must give at least
MAX_SOURCE_BYTES = 1024 * 1024  # a requirements file, pyproject.toml or uv.lock

_NAME = re.compile(NAME_PATTERN)
_ID = re.compile(ID_PATTERN)
_HEX = re.compile(r"^[0-9a-f]+$")


class SourceKind(StrEnum):
    """What a version was made from."""

    REQUIREMENTS = "requirements"  # a requirements file (names and version ranges)
    PYPROJECT = "pyproject"  # a pyproject.toml's [project] dependencies
    LOCK = "uv.lock"  # a uv lock file's pinned packages
    PREFIX = "prefix"  # an existing prefix on the nodes, registered by an admin


def is_name(value: str) -> bool:
    return _NAME.match(value) is not None


def is_id(value: str) -> bool:
    return _ID.match(value) is not None


def env_id(lock: str, python: str, platform: str) -> str:
    """The id of a locked environment: the SHA-256 of its lock, Python and platform."""
    digest = hashlib.sha256()
    for part in (lock, python, platform):
        digest.update(part.encode())
        digest.update(b"\0")
    return f"sha256:{digest.hexdigest()}"


def prefix_id(path: str) -> str:
    """The id of a registered prefix: the SHA-256 of its path."""
    digest = hashlib.sha256(b"prefix\0" + path.encode()).hexdigest()
    return f"sha256:{digest}"


def short(env: str) -> str:
    """The first hex digits of an id, as lists show it."""
    return env.split(":", 1)[-1][:SHORT_ID]


def hex_of(env: str) -> str:
    return env.split(":", 1)[-1]


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``NAME`` or ``NAME@ID`` -> (name, id or its hex prefix, lower case); ValueError saying
    what is wrong."""
    name, _, given = ref.partition("@")
    if not is_name(name):
        raise ValueError(f"'{name}' is not an environment's name: {NAME_RULE}")
    if not given:
        return name, None
    digits = given.removeprefix("sha256:").lower()
    if not _HEX.match(digits) or not MIN_ID_PREFIX <= len(digits) <= 64:
        raise ValueError(
            f"'{given}' is not an environment's id: give it as 'gpupool env show {name}' "
            f"lists it (at least {MIN_ID_PREFIX} of its hex digits)"
        )
    return name, digits


def packages_of(lock: str) -> list[str]:
    """The ``name==version`` lines of a lock, in its order."""
    found = []
    for line in lock.splitlines():
        text = line.strip()
        if text and not text.startswith(("#", "-")) and "==" in text:
            found.append(text.split(" ", 1)[0].rstrip("\\").strip())
    return found


Source = Annotated[str, Field(max_length=MAX_SOURCE_BYTES), STORABLE]


class EnvironmentCreate(BaseModel):
    """A new environment, or a new version of one: what to resolve, for which Python."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=63, description=NAME_RULE), STORABLE]
    team: Annotated[str | None, Field(max_length=100), STORABLE] = Field(
        default=None, description="its team (default: your only team)"
    )
    python: str | None = Field(
        default=None,
        pattern=PYTHON_PATTERN,
        description="the Python version, e.g. 3.11 (default: the server's)",
    )
    requirements: Source | None = Field(
        default=None,
        description="a requirements file's text: one package a line, with version ranges",
    )
    pyproject: Source | None = Field(
        default=None, description="a pyproject.toml's text: its [project] dependencies"
    )
    lock: Source | None = Field(
        default=None, description="a uv.lock's text: its packages, at the versions it pins"
    )
    description: Annotated[str | None, Field(max_length=2000), STORABLE] = None

    @model_validator(mode="after")
    def _one_source(self) -> EnvironmentCreate:
        given = [n for n in ("requirements", "pyproject", "lock") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of requirements (-r requirements.txt), pyproject "
                "(--pyproject pyproject.toml) or lock (--lock uv.lock)"
            )
        return self

    @property
    def kind(self) -> SourceKind:
        if self.requirements is not None:
            return SourceKind.REQUIREMENTS
        return SourceKind.PYPROJECT if self.pyproject is not None else SourceKind.LOCK

    @property
    def source(self) -> str:
        return self.requirements or self.pyproject or self.lock or ""


class EnvironmentRegister(BaseModel):
    """An existing prefix on the nodes (a conda env, a module tree), registered by an admin."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(max_length=63, description=NAME_RULE), STORABLE]
    path: Annotated[str, Field(max_length=4096), STORABLE] = Field(
        description="the prefix's absolute path, the same on every node (its bin/ goes first "
        "on a job's PATH)"
    )
    team: Annotated[str | None, Field(max_length=100), STORABLE] = Field(
        default=None, description="the team that may use it (default: every team)"
    )
    description: Annotated[str | None, Field(max_length=2000), STORABLE] = None


class EnvironmentVersionView(BaseModel):
    """One version of an environment."""

    id: str
    short_id: str
    name: str
    team: str | None  # None: every team's (a prefix an admin registered for all)
    python: str
    platform: str
    kind: SourceKind
    packages: list[str]
    prefix: str | None = None
    lock: str | None = None  # shown by 'env show', not listed
    created_by: str
    created_at: float
    jobs: int = 0  # pending and running jobs that use it


class EnvironmentView(BaseModel):
    """An environment and its newest version."""

    name: str
    team: str | None
    latest: EnvironmentVersionView
    version_count: int
    description: str | None = None


class EnvironmentDetailView(EnvironmentView):
    versions: list[EnvironmentVersionView]
