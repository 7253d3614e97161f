"""The memory of common NVIDIA GPU models, so that a declaration may leave it out ("8xA100").

One table; each entry names the vendor's specification it was taken from. NVIDIA's "GB" of
GPU memory is binary (an A100 80GB reports 81920 MiB), so the figures are GiB. Where a model
comes in several sizes the entry holds the one its specification leads with, and says the
others: a name that carries its size ("A100-PCIE-40GB", "V100-16GB") wins over the table,
and an explicit ":40GiB" wins over both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupool.domain.units import GiB


@dataclass(frozen=True)
class KnownGpu:
    """A GPU model, its memory per GPU, and where that figure comes from."""

    model: str  # as the vendor names it
    memory_gib: int
    source: str  # the vendor's specification page
    aliases: tuple[str, ...] = ()  # other ways people write the model
    other_sizes: tuple[int, ...] = ()  # GiB of the model's other versions

    @property
    def memory_bytes(self) -> int:
        return self.memory_gib * GiB


KNOWN_GPUS: tuple[KnownGpu, ...] = (
    KnownGpu("H200", 141, "https://www.nvidia.com/en-us/data-center/h200/"),
    KnownGpu("H100 NVL", 94, "https://www.nvidia.com/en-us/data-center/h100/"),
    KnownGpu("H100", 80, "https://www.nvidia.com/en-us/data-center/h100/", other_sizes=(94,)),
    KnownGpu("A100", 80, "https://www.nvidia.com/en-us/data-center/a100/", other_sizes=(40,)),
    KnownGpu("A40", 48, "https://www.nvidia.com/en-us/data-center/a40/"),
    KnownGpu("A30", 24, "https://www.nvidia.com/en-us/data-center/products/a30-gpu/"),
    KnownGpu("A10", 24, "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"),
    # The A10G is built for AWS; its specification is that of the EC2 G5 instances.
    KnownGpu("A10G", 24, "https://aws.amazon.com/ec2/instance-types/g5/"),
    KnownGpu("L40S", 48, "https://www.nvidia.com/en-us/data-center/l40s/"),
    KnownGpu("L40", 48, "https://www.nvidia.com/en-us/data-center/l40/"),
    KnownGpu("L4", 24, "https://www.nvidia.com/en-us/data-center/l4/"),
    KnownGpu("T4", 16, "https://www.nvidia.com/en-us/data-center/tesla-t4/"),
    KnownGpu("V100", 32, "https://www.nvidia.com/en-us/data-center/v100/", other_sizes=(16,)),
    KnownGpu("P100", 16, "https://www.nvidia.com/en-us/data-center/tesla-p100/", other_sizes=(12,)),
    KnownGpu(
        "RTX A6000",
        48,
        "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
        aliases=("A6000",),
    ),
    KnownGpu(
        "RTX 6000 Ada",
        48,
        "https://www.nvidia.com/en-us/design-visualization/rtx-6000/",
        aliases=("6000 Ada",),
    ),
    KnownGpu(
        "RTX 4090",
        24,
        "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/",
        aliases=("4090",),
    ),
    KnownGpu(
        "RTX 3090",
        24,
        "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/",
        aliases=("3090",),
    ),
)

# Words before the model that say nothing about it ("NVIDIA Tesla T4", "GeForce RTX 4090").
_BRANDS = ("NVIDIA", "TESLA", "GEFORCE", "QUADRO")
# A size in the name, as NVIDIA writes it: "A100-SXM4-80GB", "V100-SXM2-16GB", "A100 40GB".
_SIZE_IN_NAME = re.compile(r"(?<![0-9])(?P<gib>[0-9]{1,4})\s*GB\b", re.IGNORECASE)


def known_gpu(name: str) -> KnownGpu | None:
    """The table's entry for a model name, or None.

    Names are compared without case, spaces, dashes and brand words; the longest entry the
    name starts with wins, and a digit may not follow it (so "A1000" is not an "A100").
    """
    compact = _compact(name)
    best: tuple[int, KnownGpu] | None = None
    for gpu in KNOWN_GPUS:
        for key in (_compact(gpu.model), *map(_compact, gpu.aliases)):
            if _starts_model(compact, key) and (best is None or len(key) > best[0]):
                best = (len(key), gpu)
    return best[1] if best else None


def is_model_name(name: str) -> bool:
    """Whether ``name`` is exactly a model of the table (or an alias), brand words aside."""
    compact = _compact(name)
    return any(compact in (_compact(gpu.model), *map(_compact, gpu.aliases)) for gpu in KNOWN_GPUS)


def size_in_name(name: str) -> int | None:
    """The memory per GPU a model name states ("A100-PCIE-40GB": 40 GiB), or None."""
    match = _SIZE_IN_NAME.search(name)
    if match is None or int(match.group("gib")) == 0:
        return None
    return int(match.group("gib")) * GiB


def known_models() -> str:
    """The models the table knows, for messages: 'H200, H100 NVL, H100, A100, ...'."""
    return ", ".join(gpu.model for gpu in KNOWN_GPUS)


def _compact(name: str) -> str:
    text = re.sub(r"[^A-Z0-9]", "", name.upper())
    stripped = True
    while stripped:
        stripped = False
        for brand in _BRANDS:
            if text.startswith(brand) and len(text) > len(brand):
                text, stripped = text[len(brand) :], True
    return text


def _starts_model(compact: str, key: str) -> bool:
    if not compact.startswith(key):
        return False
    rest = compact[len(key) :]
    return not rest or not rest[0].isdigit()
