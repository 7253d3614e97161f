"""The declared inventory strings as GpuDevice and GpuLink entries.

GPUs: "4xA100-SXM4-80GB:80GiB,2xH100:80GiB". Links between them (optional), in the codes of
``nvidia-smi topo -m``: "0-1:NV4,2-3:NV4,0-2:SYS".
"""

from __future__ import annotations

import re

from gpupool.discovery.nvidia_smi.topo import topo_link
from gpupool.domain.inventory import GpuDevice, GpuLink, Source
from gpupool.domain.units import parse_bytes

_GROUP = re.compile(r"^(?:(?P<count>\d+)\s*[xX]\s*)?(?P<name>[^:]*?)\s*:\s*(?P<memory>.*)$")
_EXAMPLE = "write it like 4xA100-SXM4-80GB:80GiB, A100:40GiB or 2xA100:80GiB,2xH100:80GiB"
_FIELDS = ("index", "uuid", "name", "memory_bytes", "minor_number")
_LINK = re.compile(r"^(?P<a>\d+)\s*-\s*(?P<b>\d+)\s*:\s*(?P<code>[A-Za-z0-9]+)$")
_LINK_EXAMPLE = (
    "write it like 0-1:NV4,2-3:NV4 (GPU indexes, then NV<links>, PIX, PXB, PHB, NODE or SYS "
    "as nvidia-smi topo -m prints them)"
)


def declared_uuid(node: str, index: int) -> str:
    """Return the stable made-up UUID of declared GPU ``index`` on ``node``."""
    return f"GPU-declared-{node}-{index}"


def parse_group(group: str) -> tuple[int, str, int]:
    """Parse "4xA100:80GiB" into (count, name, memory bytes per GPU); ValueError if malformed."""
    match = _GROUP.match(group.strip())
    if match is None:
        raise ValueError(f"declared GPUs '{group.strip()}' lack ':<memory per GPU>'; {_EXAMPLE}")
    count = int(match.group("count") or 1)
    name = match.group("name").strip()
    if count < 1:
        raise ValueError(f"declared GPUs '{group.strip()}': the count must be at least 1")
    if not name:
        raise ValueError(f"declared GPUs '{group.strip()}' lack a GPU model name; {_EXAMPLE}")
    return count, name, _memory(group.strip(), match.group("memory"))


def _memory(group: str, text: str) -> int:
    try:
        memory = parse_bytes(text)
    except ValueError as error:
        raise ValueError(f"declared GPUs '{group}': {error}") from None
    if memory <= 0:
        raise ValueError(f"declared GPUs '{group}': the memory per GPU must be more than 0")
    return memory


def parse_declared_gpus(text: str, node: str) -> list[GpuDevice]:
    """Parse the declared inventory string into GPUs indexed 0.. across all groups.

    Every field's source is ``Source.DECLARED``; the UUIDs are ``GPU-declared-<node>-<index>``.
    """
    groups = [group for group in text.split(",") if group.strip()]
    if not groups:
        raise ValueError(f"the declared GPU inventory is empty; {_EXAMPLE}")
    gpus: list[GpuDevice] = []
    for count, name, memory in (parse_group(group) for group in groups):
        for _ in range(count):
            gpus.append(_declared_gpu(node, len(gpus), name, memory))
    return gpus


def _declared_gpu(node: str, index: int, name: str, memory: int) -> GpuDevice:
    return GpuDevice(
        index=index,
        uuid=declared_uuid(node, index),
        name=name,
        memory_bytes=memory,
        minor_number=index,
        sources=dict.fromkeys(_FIELDS, Source.DECLARED),
    )


def parse_declared_links(text: str, gpu_count: int) -> list[GpuLink]:
    """Parse "0-1:NV4,2-3:PIX" into links between declared GPUs; ValueError if malformed."""
    return [_declared_link(part.strip(), gpu_count) for part in text.split(",") if part.strip()]


def _declared_link(part: str, gpu_count: int) -> GpuLink:
    match = _LINK.match(part)
    if match is None:
        raise ValueError(f"declared link '{part}' is not GPU-GPU:KIND; {_LINK_EXAMPLE}")
    a, b, code = int(match.group("a")), int(match.group("b")), match.group("code").upper()
    if a == b or max(a, b) >= gpu_count:
        raise ValueError(
            f"declared link '{part}' must join two different GPUs of the {gpu_count} declared "
            f"(indexes 0-{gpu_count - 1})"
        )
    link = topo_link(min(a, b), max(a, b), code)
    if link is None:
        raise ValueError(f"declared link '{part}': unknown kind '{code}'; {_LINK_EXAMPLE}")
    return link.model_copy(update={"source": Source.DECLARED})
