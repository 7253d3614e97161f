"""What translating a manifest needs to look up, as its caller answers it: a gpupool image by
the reference a container names, whether a claim's name is a volume or a dataset, and the
site's map of priority classes. The team is the one the manifest names (its queue label),
or None: the caller's only team; a caller refuses a team that ``who`` may not submit to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

Storage = Literal["volume", "dataset"]


@dataclass(frozen=True)
class ImageFacts:
    """A gpupool image a container may run in: the name it is listed under, and what of its
    config decides the command (docker's rule: Entrypoint, then the command or Cmd)."""

    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str = ""


class Lookups(Protocol):
    def image(self, reference: str, team: str | None) -> ImageFacts | None:
        """The image of the team (or the site) listed under ``reference``; None if none."""
        ...

    def storage(self, name: str, team: str | None) -> Storage | None:
        """What of the team is named ``name``: a volume (first), a dataset, or nothing."""
        ...

    @property
    def priority_classes(self) -> Mapping[str, int]:
        """Kubernetes priority class names -> gpupool priorities (GPUPOOL_PRIORITY_CLASSES)."""
        ...
