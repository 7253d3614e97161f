"""What a job fetches onto its node before it starts, and how placement and ``why`` name it.

A job may need its environment built, its dataset versions materialised and its image
unpacked on the node it is placed on; a node that holds them already starts it sooner and
fetches nothing. Each thing has a key (``scheduler.types.Want`` and ``NodeCapacity.holds``
use them): ``env:sha256:<hex>``, ``dataset:<manifest hex>``, ``image:sha256:<hex>``. The
functions here read a job's recorded spec (the stored JSON) and name its wants for people:
``environment ml``, ``dataset imagenet:3``, ``image pytorch:2.4``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ENV, DATASET, IMAGE = "env", "dataset", "image"


def env_key(env_id: str) -> str:
    """The key of an environment by its id (``sha256:<hex>``)."""
    return f"{ENV}:{env_id}"


def dataset_key(manifest: str) -> str:
    """The key of a dataset version by its manifest's hex digest."""
    return f"{DATASET}:{manifest}"


def image_key(digest: str) -> str:
    """The key of an image by its manifest's digest (``sha256:<hex>``)."""
    return f"{IMAGE}:{digest}"


def wants_of(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, what people call it) of each thing the job with this recorded spec fetches
    onto its node: its environment, its dataset versions, its image; in that order."""
    found: list[tuple[str, str]] = []
    name, _, env_id = (spec.get("environment") or "").partition("@")
    if env_id.startswith("sha256:"):  # a registered prefix is on every node: nothing fetched
        found.append((env_key(env_id), f"environment {name}"))
    for use in spec.get("datasets") or ():
        if isinstance(use, Mapping) and use.get("manifest"):
            version = f":{use['version']}" if use.get("version") else ""
            found.append((dataset_key(use["manifest"]), f"dataset {use.get('name')}{version}"))
    if digest := spec.get("image_digest"):
        found.append((image_key(digest), f"image {spec.get('image') or digest}"))
    return found


def held_note(spec: Mapping[str, Any], node: str, held: Iterable[str]) -> str:
    """A sentence on what ``node`` held of the job's wants when it was placed there, and
    what it fetches; empty for a job that fetches nothing. An environment not held is not
    named: it may be a registered prefix, on every node (one to build says so while it
    builds, reason EnvBuilding)."""
    keys = set(held)
    wants = wants_of(spec)
    had = [label for key, label in wants if key in keys]
    fetches = [label for key, label in wants if key not in keys and not key.startswith(ENV)]
    parts = []
    if had:
        parts.append(f"{node} held its {_and(had)}")
    if fetches:
        parts.append(f"{'it fetches' if had else f'{node} fetches its'} {_and(fetches)}")
    return "; ".join(parts)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
