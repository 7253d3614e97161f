"""A manifest read (``Plan``: the node's container, the nodes, the framework, the job-wide
policy) made into the gpupool Job it runs as, with what had to be looked up.

* The image: a gpupool image of the team listed under the container's reference, else
  ``image_not_available`` (or, asked to ignore images, none: the nodes' own system).
* The command, as docker runs an image: the container's ``command`` + ``args``; a command
  left to the image is the image's Cmd (or ``args``) after its Entrypoint, which gpupool
  runs before every command of a job in an image.
* The launcher's mode and processes per node: torch runs a command that starts torchrun
  itself once per node (``per-node``), any other once per GPU (``per-gpu``) or as many
  times as ``nprocPerNode`` says; MPI runs a command that is mpirun's line as it is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import ValidationError

from gpupool.domain.jobfiles import JobBody
from gpupool.domain.mpi import starts_mpirun
from gpupool.errors import (
    ClaimNotFound,
    ImageNotAvailable,
    KubeflowCommandMissing,
    invalid_with_code,
)
from gpupool.services.kubeflow._fields import At
from gpupool.services.kubeflow._pods import Container, Mount, Resources
from gpupool.services.kubeflow._policies import Policy, priority_of, team_of
from gpupool.services.kubeflow._ports import ImageFacts, Lookups

Framework = Literal["torch", "tensorflow", "mpi"]
Procs = int | Literal["auto", "gpu", "cpu"]
PROCS_WORDS = ("auto", "gpu", "cpu")
GPU = "nvidia.com/gpu"
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_SHELLS = ("sh", "bash", "dash", "zsh")
_TORCHRUN = re.compile(
    r"(^|[\s;&|(])(torchrun|python[\d.]*\s+-m\s+torch\.distributed\.(run|launch))(\s|$)"
)
_TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class Plan:
    """A manifest read. ``framework`` None: no launcher (the command as it is on every
    node). ``procs``: processes per node as written (``nprocPerNode``), None when not;
    ``procs_default``: what the operator takes then for a command that runs torchrun
    (Trainer: "auto"); ``chief``: TensorFlow's first node is the chief."""

    container: Container
    nodes: int
    framework: Framework | None
    policy: Policy
    procs: Procs | None = None
    procs_field: str = ""
    procs_default: Procs | None = None
    chief: bool = False


def assemble(plan: Plan, root: At, lookups: Lookups, ignore_image: bool) -> JobBody:
    """The gpupool Job ``plan`` runs as (see the module's docstring); notices on ``root``'s
    fields for what it does not honour."""
    container, team = plan.container, team_of(plan.policy, root)
    priority = priority_of(_pod_class(plan.policy, container), lookups.priority_classes, root)
    facts = _image_facts(container, team, lookups, ignore_image, root)
    in_image = facts is not None and not ignore_image
    command = _command(container, facts, in_image, root)
    launcher, mode, procs = _launch(plan, command, root)
    spec: dict[str, Any] = {
        "name": plan.policy.name,
        "command": list(command),
        "env": dict(container.env),
        "resources": _resources(container.resources),
        "nodes": plan.nodes,
        "launcher": launcher,
        "launcher_mode": mode,
        "procs_per_node": procs,
        "team": team,
        "priority": priority,
        "max_runtime_seconds": plan.policy.max_runtime,
        "grace_period_seconds": container.grace_seconds,
        "retries": plan.policy.retries,
        "hold": plan.policy.hold or None,
        "shm_bytes": container.shm_bytes,
        "image": facts.name if in_image and facts is not None else None,
        "workdir": _workdir(container, facts if in_image else None, root),
        **_storage(container.mounts, team, lookups, root),
    }
    return _validated({k: v for k, v in spec.items() if v not in (None, {}, [])}, root)


def _pod_class(policy: Policy, container: Container) -> Policy:
    return policy.with_class(f"{container.field}.priorityClassName", container.priority_class)


# -- the image and the command ----------------------------------------------------------------


def _image_facts(
    container: Container, team: str | None, lookups: Lookups, ignore: bool, root: At
) -> ImageFacts | None:
    """The gpupool image of the container's reference; ImageNotAvailable when there is none
    and images are not ignored."""
    if container.image is None:
        if ignore:
            return None
        raise root.invalid(container.image_field, "the container's image")
    facts = lookups.image(container.image, team)
    if ignore:
        root.fields.note(
            container.image_field,
            f"asked to ignore images: the job runs on the nodes' own system, not in "
            f"{container.image}",
        )
        return facts
    if facts is None:
        message = (
            f"{container.image_field}: {container.image} is not a gpupool image of the team: "
            f"pull it ('gpupool image pull {container.image}') or import it, or run on the "
            "nodes' own system with 'gpupool apply --ignore-image' (ignore_image in the API)"
        )
        field = {"field": container.image_field, "message": "not a gpupool image"}
        raise ImageNotAvailable(message, fields=[field])
    return facts


def _command(
    container: Container, facts: ImageFacts | None, in_image: bool, root: At
) -> tuple[str, ...]:
    """What the job runs (see the module's docstring)."""
    args = container.args
    if container.command is not None:
        if in_image and facts is not None and facts.entrypoint:
            root.fields.note(
                f"{container.field}.command",
                f"the image's Entrypoint ({' '.join(facts.entrypoint)}) runs before the "
                "command, as gpupool runs every image (Kubernetes would replace it)",
            )
        return (*container.command, *(args or ()))
    if facts is None:
        raise _no_command(container, "and its image is not a gpupool image")
    tail = args if args is not None else facts.cmd
    command = tail if in_image else (*facts.entrypoint, *tail)
    if not command:
        raise _no_command(container, f"and its image {facts.name} gives no Cmd")
    return tuple(command)


def _no_command(container: Container, why: str) -> KubeflowCommandMissing:
    field = f"{container.field}.command"
    return KubeflowCommandMissing(
        f"{field}: the container leaves its command to the image, {why}: give the "
        "container a command (or args)",
        fields=[{"field": field, "message": "give a command"}],
    )


def _workdir(container: Container, facts: ImageFacts | None, root: At) -> str | None:
    """On the nodes' own system, the working directory; in an image, its WorkingDir (a job's
    workdir is a directory of the node, bound read-write, not one of the image)."""
    if facts is None or not container.workdir:
        return container.workdir
    if container.workdir.rstrip("/") != facts.workdir.rstrip("/"):
        root.fields.note(
            f"{container.field}.workingDir",
            f"a job in an image starts in the image's WorkingDir ({facts.workdir or '/'}); "
            "gpupool's workdir is a directory of the node",
        )
    return None


# -- the launcher -----------------------------------------------------------------------------


def _launch(
    plan: Plan, command: Sequence[str], root: At
) -> tuple[Framework | None, str | None, int | None]:
    gpus = plan.container.resources.gpus or 0
    if plan.framework is None:  # a plain runtime: the command as it is, on every node
        return None, None, None
    if plan.framework == "tensorflow":
        return "tensorflow", "chief" if plan.chief else None, None
    if plan.framework == "mpi":
        return "mpi", _mpi_mode(plan, command, root), _procs(plan, plan.procs, root)
    if runs_torchrun(command):
        chosen = plan.procs if plan.procs is not None else plan.procs_default
        return "torch", "per-node", _procs(plan, chosen, root)
    if plan.procs is None:  # the operator runs the command once per node
        return "torch", None, 1 if gpus > 1 else None
    return "torch", None, _procs(plan, plan.procs, root)


def _mpi_mode(plan: Plan, command: Sequence[str], root: At) -> str | None:
    if starts_mpirun(command):
        return "mpirun"
    root.fields.note(
        f"{plan.container.field}.command",
        "the launcher's command does not start with mpirun: gpupool runs it under mpirun, "
        "once per slot of every node",
    )
    return None


def _procs(plan: Plan, value: Procs | None, root: At) -> int | None:
    """Processes per node: a number as given; "gpu" the node's GPUs, "cpu" its CPUs,
    "auto" its GPUs when it has some, else its CPUs (as torchrun and Trainer count)."""
    if value is None or isinstance(value, int):
        return value
    gpus, cpus = plan.container.resources.gpus or 0, plan.container.resources.cpus or 1.0
    if value == "gpu" and not gpus:
        raise root.invalid(plan.procs_field, f'a number: "gpu" counts GPUs, and no {GPU} is asked')
    if value in ("gpu", "auto") and gpus:
        return gpus
    return max(1, math.ceil(cpus))


def runs_torchrun(command: Sequence[str]) -> bool:
    """Whether ``command`` starts torchrun itself (``torchrun``, ``python -m
    torch.distributed.run``, or a shell's script that does)."""
    if not command:
        return False
    first = PurePosixPath(command[0]).name
    if first == "torchrun":
        return True
    if _PYTHON.match(first) and len(command) > 2 and command[1] == "-m":
        return command[2] in _TORCH_MODULES
    if first in _SHELLS and "-c" in command[1:-1]:
        script = command[command.index("-c", 1) + 1]
        return bool(_TORCHRUN.search(script))
    return False


# -- resources and storage --------------------------------------------------------------------


def _resources(resources: Resources) -> dict[str, Any]:
    asked = {
        "gpus": resources.gpus or None,
        "cpus": resources.cpus,
        "memory_bytes": resources.memory,
    }
    return {name: value for name, value in asked.items() if value is not None}


def _storage(
    mounts: Sequence[Mount], team: str | None, lookups: Lookups, root: At
) -> dict[str, list[dict[str, str]]]:
    """Each claim as the team's volume of its name (read-write), else its dataset
    (read-only); ClaimNotFound when the team has neither."""
    volumes, datasets = [], []
    for mount in mounts:
        found = lookups.storage(mount.claim, team)
        if found is None:
            message = (
                f"{mount.field}: the team has no volume or dataset named {mount.claim}: make "
                f"the volume ('gpupool volume create {mount.claim}') or the dataset, or name "
                "one the team has"
            )
            field = {"field": mount.field, "message": "no such volume or dataset"}
            raise ClaimNotFound(message, fields=[field])
        if found == "volume" and mount.read_only:
            root.fields.note(mount.field, "a gpupool volume is mounted read-write")
        if found == "dataset" and not mount.read_only:
            root.fields.note(mount.field, "a gpupool dataset is mounted read-only")
        uses = volumes if found == "volume" else datasets
        uses.append({"name": mount.claim, "mount": mount.path})
    return {"volumes": volumes, "datasets": datasets}


# -- the job ----------------------------------------------------------------------------------


def _validated(spec: dict[str, Any], root: At) -> JobBody:
    """The job's body; a problem of it as the error its submit would give (the code kept),
    said to be of the job the manifest translates to."""
    try:
        return JobBody.model_validate(spec)
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem.get("loc", ()))
        message = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        text = f"the gpupool job it translates to: {where or 'spec'}: {message}"
        raise invalid_with_code(str(problem.get("type", "")))(text) from None
