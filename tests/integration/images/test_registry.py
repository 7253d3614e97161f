"""The tests' own registry and image builder (tests.support.images) do what the image tests
rely on: an image built here is pushed, and read back from the registry as it was built."""

from __future__ import annotations

import json
import subprocess

from tests.support.images import ImageConfig, Registry, base_members, layer


def test_a_built_image_is_served_by_the_registry(image_registry: Registry) -> None:
    config = ImageConfig(env=["PATH=/bin", "MARK=1"], entrypoint=["/bin/sh"], workdir="/srv")
    ref = image_registry.push("selftest/base", [layer(base_members())], config)
    done = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert "MARK=1" in seen["Env"]
    assert len(seen["Layers"]) == 1
