"""The declared inventory strings as GpuDevice and GpuLink entries.

GPUs: "4xA100-SXM4-80GB:80GiB,2xH100:80GiB"; the memory may be left out for a model of
``gpu_models`` ("8xA100"). Links between them (optional), in the codes of
``nvidia-smi topo -m``: "0-1:NV4,2-3:NV4,0-2:SYS".
"""

from __future__ import annotations

import re

from gpupool.discovery.gpu_models import is_model_name, known_gpu, known_models, size_in_name
from gpupool.discovery.nvidia_smi.topo import topo_link
from gpupool.domain.inventory import GpuDevice, GpuLink, Source
from gpupool.domain.units import format_bytes, parse_bytes

_GROUP = re.compile(r"^(?:(?P<count>\d+)\s*[xX]\s*)?(?P<name>[^:]*?)\s*(?::\s*(?P<memory>.*))?$")
_COUNT_LAST = re.compile(r"\s*[xX]\s*(?P<count>\d{1,4})$")  # "A100x8": the count last
_EXAMPLE = (
    "write it as [COUNTx]MODEL[:MEMORY per GPU], groups separated by commas, e.g. 8xA100, "
    "4xA100-SXM4-80GB:80GiB, 2xA100:40GiB,2xH100"
)
_FIELDS = ("index", "uuid", "name", "memory_bytes", "minor_number")
_LINK = re.compile(r"^(?P<a>\d+)\s*-\s*(?P<b>\d+)\s*:\s*(?P<code>[A-Za-z0-9]+)$")
_LINK_EXAMPLE = (
    "write it like 0-1:NV4,2-3:NV4 (GPU indexes, then NV<links>, PIX, PXB, PHB, NODE or SYS "
    "as nvidia-smi topo -m prints them)"
)


def declared_uuid(node: str, index: int) -> str:
    """Return the stable made-up UUID of declared GPU ``index`` on ``node``."""
    return f"GPU-declared-{node}-{index}"


class DeclaredSettingError(ValueError):
    """A declared inventory setting is malformed. ``setting`` names it (``declared_gpus``,
    ``declared_links``, ``declared_cpus``, ``declared_memory``); the message says how to
    write it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


def parse_group(group: str) -> tuple[int, str, int]:
    """Parse "4xA100:80GiB" (or "4xA100", a known model) into (count, name, memory bytes per
    GPU); DeclaredSettingError if malformed or if the memory of an unknown model is left out."""
    text = group.strip()
    match = _GROUP.match(text)
    if match is None:  # the pattern takes any text; kept for the type checker
        raise _gpus_error(f"declared GPUs '{text}' cannot be read; {_EXAMPLE}")
    count = int(match.group("count") or 1)
    name = match.group("name").strip()
    if count < 1:
        raise _gpus_error(f"declared GPUs '{text}': the count must be at least 1; {_EXAMPLE}")
    if not name:
        raise _gpus_error(f"declared GPUs '{text}' lack a GPU model name; {_EXAMPLE}")
    count_last = None if match.group("count") else _COUNT_LAST.search(name)
    if count_last is not None and is_model_name(name[: count_last.start()]):
        model = name[: count_last.start()]
        raise _gpus_error(
            f"declared GPUs '{text}': write the count first, like {count_last['count']}x{model}"
        )
    memory = match.group("memory")
    if memory is None:
        return count, name, _model_memory(text, name)
    return count, name, _memory(text, memory)


def memory_notes(text: str) -> list[str]:
    """What the memory of each group declared without it ("8xA100") was taken from, so that
    the operator sees the figure assumed and how to declare another."""
    groups = [group.strip() for group in text.split(",") if group.strip()]
    return [note for note in map(_memory_note, groups) if note is not None]


def _memory_note(group: str) -> str | None:
    count, name, memory = parse_group(group)
    gpu = known_gpu(name)
    if ":" in group or size_in_name(name) is not None or gpu is None:
        return None
    note = (
        f"the declared {name} GPUs are taken to have {format_bytes(memory)} each "
        f"(the {gpu.model}'s specification, {gpu.source})"
    )
    if gpu.other_sizes:
        sizes = " or ".join(f"{size} GiB" for size in gpu.other_sizes)
        other = f"{count}x{name}:{gpu.other_sizes[0]}GiB"
        note += f"; it also comes with {sizes}: declare {other} if yours have that"
    return note


def _model_memory(group: str, name: str) -> int:
    """The memory per GPU of a model declared without it: from its name, else the table."""
    stated = size_in_name(name)
    if stated is not None:
        return stated
    gpu = known_gpu(name)
    if gpu is None:
        raise _gpus_error(
            f"declared GPUs '{group}': gpupool does not know how much memory a '{name}' has; "
            f"give it after a colon, like {group}:24GiB (models known without it: "
            f"{known_models()})"
        )
    return gpu.memory_bytes


def _memory(group: str, text: str) -> int:
    try:
        memory = parse_bytes(text)
    except ValueError as error:
        raise _gpus_error(f"declared GPUs '{group}': {error}") from None
    if memory <= 0:
        raise _gpus_error(f"declared GPUs '{group}': the memory per GPU must be more than 0")
    return memory


def _gpus_error(message: str) -> DeclaredSettingError:
    return DeclaredSettingError("declared_gpus", message)


def parse_declared_gpus(text: str, node: str) -> list[GpuDevice]:
    """Parse the declared inventory string into GPUs indexed 0.. across all groups.

    Every field's source is ``Source.DECLARED``; the UUIDs are ``GPU-declared-<node>-<index>``.
    """
    groups = [group for group in text.split(",") if group.strip()]
    if not groups:
        raise _gpus_error(f"the declared GPU inventory is empty; {_EXAMPLE}")
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
    """Parse "0-1:NV4,2-3:PIX" into links between declared GPUs; DeclaredSettingError if
    malformed."""
    return [_declared_link(part.strip(), gpu_count) for part in text.split(",") if part.strip()]


def _declared_link(part: str, gpu_count: int) -> GpuLink:
    match = _LINK.match(part)
    if match is None:
        raise _links_error(f"declared link '{part}' is not GPU-GPU:KIND; {_LINK_EXAMPLE}")
    a, b, code = int(match.group("a")), int(match.group("b")), match.group("code").upper()
    if a == b or max(a, b) >= gpu_count:
        raise _links_error(
            f"declared link '{part}' must join two different GPUs of the {gpu_count} declared "
            f"(indexes 0-{gpu_count - 1})"
        )
    link = topo_link(min(a, b), max(a, b), code)
    if link is None:
        raise _links_error(f"declared link '{part}': unknown kind '{code}'; {_LINK_EXAMPLE}")
    return link.model_copy(update={"source": Source.DECLARED})


def _links_error(message: str) -> DeclaredSettingError:
    return DeclaredSettingError("declared_links", message)
