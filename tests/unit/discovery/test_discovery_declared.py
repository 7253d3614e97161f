"""The declared inventory string."""

from __future__ import annotations

import pytest

from gpupool.discovery.declared import parse_declared_gpus, parse_group
from gpupool.domain.inventory import Source
from gpupool.domain.units import GiB


def test_count_name_and_memory() -> None:
    gpus = parse_declared_gpus("4xA100-SXM4-80GB:80GiB", "node1")
    assert [gpu.index for gpu in gpus] == [0, 1, 2, 3]
    assert {gpu.name for gpu in gpus} == {"A100-SXM4-80GB"}
    assert {gpu.memory_bytes for gpu in gpus} == {80 * GiB}
    assert [gpu.uuid for gpu in gpus] == [f"GPU-declared-node1-{i}" for i in range(4)]
    assert [gpu.minor_number for gpu in gpus] == [0, 1, 2, 3]  # /dev/nvidia0..3
    assert gpus[0].sources == {
        "index": Source.DECLARED,
        "uuid": Source.DECLARED,
        "name": Source.DECLARED,
        "memory_bytes": Source.DECLARED,
        "minor_number": Source.DECLARED,
    }


def test_single_gpu_without_count() -> None:
    (gpu,) = parse_declared_gpus("A100:40GiB", "n")
    assert (gpu.name, gpu.memory_bytes, gpu.uuid) == ("A100", 40 * GiB, "GPU-declared-n-0")


def test_groups_continue_the_index() -> None:
    gpus = parse_declared_gpus("2xA100:80GiB, 2X H100 : 80GiB,", "n")
    assert [(gpu.index, gpu.name) for gpu in gpus] == [
        (0, "A100"),
        (1, "A100"),
        (2, "H100"),
        (3, "H100"),
    ]
    assert gpus[3].uuid == "GPU-declared-n-3"


def test_is_deterministic() -> None:
    assert parse_declared_gpus("2xT4:16GB", "a") == parse_declared_gpus("2xT4:16GB", "a")


def test_group_parts() -> None:
    assert parse_group("3x RTX-3090:24GiB") == (3, "RTX-3090", 24 * GiB)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        (" , ", "empty"),
        ("4xA100", "lack ':<memory per GPU>'"),
        ("4xA100:lots", "'lots' is not a byte quantity"),
        ("0xA100:80GiB", "at least 1"),
        ("4x:80GiB", "lack a GPU model name"),
        (":80GiB", "lack a GPU model name"),
        ("A100:0GiB", "more than 0"),
        ("2xA100:80GiB,H100", "'H100' lack"),
    ],
)
def test_bad_strings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_declared_gpus(text, "n")
