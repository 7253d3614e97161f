"""How a job's wants are keyed and named (``domain.locality``)."""

from __future__ import annotations

from gpupool.domain.locality import dataset_key, env_key, held_note, image_key, wants_of

ENV = "sha256:" + "cd" * 32
MANIFEST = "ab" * 32
IMAGE = "sha256:" + "12" * 32
SPEC = {
    "environment": f"torch@{ENV}",
    "datasets": [
        {"name": "imagenet", "version": 3, "manifest": MANIFEST},
        {"name": "captions", "version": 1, "manifest": "ef" * 32},
    ],
    "image": "pytorch:2.4",
    "image_digest": IMAGE,
}


def test_wants_are_the_environment_the_datasets_and_the_image_in_that_order() -> None:
    assert wants_of(SPEC) == [
        (env_key(ENV), "environment torch"),
        (dataset_key(MANIFEST), "dataset imagenet:3"),
        (dataset_key("ef" * 32), "dataset captions:1"),
        (image_key(IMAGE), "image pytorch:2.4"),
    ]
    assert wants_of({"command": ["true"]}) == []
    assert wants_of({"environment": "torch"}) == []  # not recorded yet: nothing to key


def test_the_note_says_what_the_node_held_and_what_it_fetches() -> None:
    held = [env_key(ENV), dataset_key(MANIFEST)]
    assert held_note(SPEC, "n2", held) == (
        "n2 held its environment torch and dataset imagenet:3; "
        "it fetches dataset captions:1 and image pytorch:2.4"
    )
    assert held_note(SPEC, "n1", []) == (
        "n1 fetches its dataset imagenet:3, dataset captions:1 and image pytorch:2.4"
    )
    # an environment not held is not named: it may be a registered prefix, on every node
    assert held_note({"environment": f"torch@{ENV}"}, "n1", []) == ""
    assert held_note({"command": ["true"]}, "n1", []) == ""
