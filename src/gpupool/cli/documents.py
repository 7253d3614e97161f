"""Job files' documents printed: as YAML (several separated by ---) or as a JSON list.

Shared by ``gpupool apply`` (``cli.jobfiles``) and ``gpupool run --dry-run`` (``cli.jobs``);
ruamel.yaml is imported only when YAML is printed.
"""

from __future__ import annotations

import json
from typing import Any


class Format:
    """What ``-o`` takes for documents."""

    YAML = "yaml"
    JSON = "json"


def dump(documents: list[dict[str, Any]], fmt: str) -> str:
    """The documents as YAML (separated by ---) or as a JSON list."""
    if fmt == Format.JSON:
        return json.dumps(documents, indent=2) + "\n"
    import io

    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # keep apiVersion, kind, metadata, spec
    stream = io.StringIO()
    yaml.dump_all(documents, stream)
    return "---\n" + stream.getvalue() if len(documents) > 1 else stream.getvalue()
