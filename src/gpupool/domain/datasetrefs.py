"""What a job says of the datasets and volumes it uses, and the names' rules (no I/O here).

Kept apart from ``gpupool.domain.datasets`` (the read models), which imports the job read
models: ``JobSpec.datasets`` is made of ``DatasetUse``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
NAME_RULE = (
    "a dataset's or a volume's name is 1 to 100 letters, digits, '.', '_' or '-', starting "
    "with a letter or a digit (no ':', which separates a version: NAME:3)"
)
SHA256_PATTERN = r"^[0-9a-f]{64}$"
MOUNT_ROOT = "/datasets"  # a dataset is mounted at /datasets/NAME unless the job says where
# where a job's datasets and volumes may not be mounted: the sandbox's own places
RESERVED_MOUNTS = (
    "/proc",
    "/dev",
    "/sys",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/etc",
    "/tmp",
    "/run",
)
_NAME = re.compile(NAME_PATTERN)
_SHA256 = re.compile(SHA256_PATTERN)


def is_dataset_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.match(value) is not None


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and _SHA256.match(value) is not None


# -- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetRef:
    """A job's use of a dataset: ``name``, ``version`` (None until resolved: the latest) and
    where it is mounted in the job's sandbox."""

    name: str
    version: int | None
    mount: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "mount": self.mount}


def parse_dataset_ref(value: str) -> DatasetRef:
    """``NAME``, ``NAME:VERSION``, ``NAME:/MOUNT`` or ``NAME:VERSION:/MOUNT``; ValueError
    saying what is wrong."""
    name, _, rest = value.partition(":")
    if not is_dataset_name(name):
        raise ValueError(f"'{name}' is not a dataset's name: {NAME_RULE}")
    version: int | None = None
    mount = ""
    if rest.startswith("/"):
        mount = rest
    elif rest:
        number, _, mount = rest.partition(":")
        if number != "latest":
            if not number.isdigit() or int(number) < 1 or len(number) > 12:
                raise ValueError(
                    f"'{number}' is not a version: versions are numbered 1, 2, 3 ... (or 'latest')"
                )
            version = int(number)
        if _ and not mount:
            raise ValueError("give a mount path after the version: NAME:3:/data")
    return DatasetRef(name, version, check_mount(mount) if mount else f"{MOUNT_ROOT}/{name}")


def check_mount(mount: str) -> str:
    """``mount``, normalised, if a dataset or a volume may be mounted there (an absolute path,
    no '..', not the sandbox's system places); ValueError otherwise."""
    if not mount.startswith("/") or "\0" in mount:
        raise ValueError(f"'{mount[:200]}' is not a mount path: give an absolute path, /data")
    parts = mount.split("/")
    if ".." in parts or "." in parts:
        raise ValueError(f"a mount path cannot hold '.' or '..': {mount[:200]}")
    normal = posixpath.normpath(mount)
    if normal == "/" or len(normal) > 1024:
        raise ValueError(f"'{mount[:200]}' cannot be a mount path: give a directory such as /data")
    for reserved in RESERVED_MOUNTS:
        if normal == reserved or normal.startswith(reserved + "/"):
            raise ValueError(f"{reserved} belongs to the sandbox: mount elsewhere, e.g. /data")
    return normal


def env_name(name: str) -> str:
    """The environment variable that tells a job where the dataset ``name`` is:
    ``GPUPOOL_DATASET_<NAME>``, upper-cased, every other character than letters and digits
    as '_'."""
    return "GPUPOOL_DATASET_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


class DatasetUse(BaseModel):
    """A dataset a job reads (``JobSpec.datasets``): ``NAME[:VERSION][:/MOUNT]`` or this
    object. The submit resolves ``version`` (the latest when None) in the job's team and
    records it with its ``manifest``, so that every attempt of the job sees exactly that
    version, read-only, at ``mount`` (``/datasets/NAME`` unless given)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=100, description="a dataset of the job's team")
    version: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="its version (None: the latest)"
    )
    mount: str | None = Field(
        default=None, max_length=1024, description="where the job sees it (/datasets/NAME)"
    )
    manifest: str | None = Field(
        default=None,
        pattern=SHA256_PATTERN,
        description="the version's manifest, recorded at submit (what was given is replaced)",
    )

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_dataset_ref(value).to_json()
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_dataset_name(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("mount")
    @classmethod
    def _mount(cls, value: str | None) -> str | None:
        return None if value is None else check_mount(value)

    @model_validator(mode="after")
    def _default_mount(self) -> DatasetUse:
        if self.mount is None:
            self.mount = f"{MOUNT_ROOT}/{self.name}"
        return self


def check_uses(uses: list[DatasetUse]) -> list[DatasetUse]:
    """``uses`` if no two are mounted at the same place, or one inside another."""
    mounts = sorted(use.mount or "" for use in uses)
    for before, after in zip(mounts, mounts[1:], strict=False):
        if after == before or after.startswith(before + "/"):
            raise ValueError(f"two datasets are mounted at {after}: give each its own mount")
    return uses


class VolumeUse(BaseModel):
    """A volume a job mounts read-write (``JobSpec.volumes``): ``NAME:/MOUNT`` or this
    object. The submit checks it is a volume of the job's team and records its ``id``,
    which names its directory on the node."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=100, description="a volume of the job's team")
    mount: str = Field(max_length=1024, description="where the job sees it, read-write")
    id: int | None = Field(default=None, description="recorded at submit")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        if isinstance(value, str):
            name, sep, mount = value.partition(":")
            if not sep or not mount:
                raise ValueError(f"give a volume as NAME:/MOUNT, e.g. {name or 'scratch'}:/scratch")
            return {"name": name, "mount": mount}
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_dataset_name(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("mount")
    @classmethod
    def _mount(cls, value: str) -> str:
        return check_mount(value)


def check_mounts(datasets: list[DatasetUse], volumes: list[VolumeUse]) -> None:
    """No two datasets or volumes mounted at the same place, or one inside another."""
    mounts = sorted([use.mount or "" for use in datasets] + [use.mount for use in volumes])
    for before, after in zip(mounts, mounts[1:], strict=False):
        if after == before or after.startswith(before + "/"):
            raise ValueError(f"two datasets or volumes are mounted at {after}: give each its own")


def volume_env_name(name: str) -> str:
    """``GPUPOOL_VOLUME_<NAME>``: where the job sees the volume ``name``."""
    return "GPUPOOL_VOLUME_" + re.sub(r"[^A-Z0-9]", "_", name.upper())
