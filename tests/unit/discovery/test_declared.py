"""The declared inventory string."""

from __future__ import annotations

import pytest

from gpupool.discovery.declared import (
    DeclaredSettingError,
    memory_notes,
    parse_declared_gpus,
    parse_group,
)
from gpupool.discovery.gpu_models import KNOWN_GPUS, known_gpu
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
        ("4xFOO", "does not know how much memory a 'FOO' has; give it after a colon"),
        ("A100x8", "write the count first, like 8xA100"),
        ("4xA100:lots", "'lots' is not a byte quantity"),
        ("0xA100:80GiB", "at least 1"),
        ("4x:80GiB", "lack a GPU model name"),
        (":80GiB", "lack a GPU model name"),
        ("A100:0GiB", "more than 0"),
        ("2xA100:80GiB,H20", "'H20'"),
    ],
)
def test_bad_strings(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_declared_gpus(text, "n")


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("8xA100", 80),  # the A100's specification leads with 80 GB
        ("A100-PCIE-40GB", 40),  # a size in the name wins over the table
        ("Tesla V100-SXM2-16GB", 16),
        ("V100", 32),
        ("2x NVIDIA H100 NVL", 94),  # the longest entry the name starts with
        ("H100-SXM5", 80),
        ("h200", 141),
        ("A10G", 24),
        ("L40S", 48),
        ("4xL4", 24),
        ("T4", 16),
        ("GeForce RTX 4090", 24),
        ("RTX A6000", 48),
        ("A6000", 48),
        ("A100:40GiB", 40),  # an explicit memory wins over both
    ],
)
def test_common_models_need_no_memory(text: str, gib: int) -> None:
    assert parse_group(text)[2] == gib * GiB


@pytest.mark.parametrize("name", ["A1000", "RTX 6000", "H20", "GH200", "MI300X"])
def test_other_models_are_not_guessed(name: str) -> None:
    assert known_gpu(name) is None
    with pytest.raises(DeclaredSettingError, match=f"'{name}' has; give it after a colon"):
        parse_group(f"2x{name}")


def test_every_known_model_names_its_vendor_specification() -> None:
    for gpu in KNOWN_GPUS:
        assert gpu.source.startswith("https://"), gpu.model
        assert known_gpu(gpu.model) is gpu
        assert all(known_gpu(alias) is gpu for alias in gpu.aliases)


def test_memory_notes_only_for_what_was_assumed() -> None:
    notes = memory_notes("8xA100,2xH100:80GiB,A100-PCIE-40GB,T4")
    assert len(notes) == 2
    assert "A100 GPUs are taken to have 80 GiB" in notes[0] and "8xA100:40GiB" in notes[0]
    assert "T4 GPUs are taken to have 16 GiB" in notes[1] and "also comes" not in notes[1]
