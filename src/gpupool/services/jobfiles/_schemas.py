"""The JSON schema of each kind's document, for editors (yaml-language-server and the like):
a document of that kind, its ``spec`` the kind's request body."""

from __future__ import annotations

from typing import Any

from gpupool.domain.jobfiles import API_VERSION, KindView
from gpupool.errors import NotFound
from gpupool.services.jobfiles._kinds import KINDS, kind_of

SCHEMAS = "/api/v1/schemas"


def kinds() -> list[KindView]:
    """Every kind a job file may hold, with where its schema is."""
    return [
        KindView(kind=k.name, description=k.description, schema_url=f"{SCHEMAS}/{k.name}")
        for k in KINDS.values()
    ]


def schema(name: str) -> dict[str, Any]:
    """The JSON schema of a document of kind ``name``; NotFound for a kind gpupool lacks."""
    kind = kind_of(name)
    if kind is None:
        raise NotFound(
            f"no kind '{name}': the kinds are {', '.join(KINDS)} (GET {SCHEMAS}/ lists them)"
        )
    body = kind.body.model_json_schema(ref_template="#/$defs/{model}")
    defs = body.pop("$defs", {})
    spec = {k: v for k, v in body.items() if k != "title"}
    spec["properties"] = {
        k: v for k, v in spec.get("properties", {}).items() if k != kind.name_field
    }
    document: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{SCHEMAS}/{kind.name}",
        "title": f"gpupool {kind.name}",
        "description": kind.description,
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "spec"],
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": kind.name},
            "metadata": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"name": body.get("properties", {}).get(kind.name_field, {})},
            },
            "spec": spec,
        },
    }
    if defs:
        document["$defs"] = defs
    return document
