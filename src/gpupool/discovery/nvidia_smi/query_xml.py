"""``nvidia-smi -q -x``: the XML report, one ``<gpu>`` element per GPU."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gpupool.discovery.nvidia_smi.values import clean, to_bytes, to_int, to_percent
from gpupool.discovery.pci import normalize_bus_id
from gpupool.discovery.report import GpuReport, present_fields
from gpupool.domain.inventory import GpuDevice, MigDevice, Source


def _text(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    return clean(found.text) if found is not None else None


def parse_query_xml(text: str) -> GpuReport:
    """Parse ``nvidia-smi -q -x`` into GPUs (index = document order), versions and warnings.

    Raises ValueError when ``text`` is not an ``nvidia_smi_log`` XML document.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as error:
        raise ValueError(f"nvidia-smi -q -x output is not XML: {error}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x output has root <{root.tag}>, not <nvidia_smi_log>")
    report = GpuReport(source=Source.NVIDIA_SMI)
    report.driver_version = _text(root, "driver_version")
    report.cuda_version = _text(root, "cuda_version")
    elements = root.findall("gpu")
    for index, element in enumerate(elements):
        _add_xml_gpu(report, index, element)
    _check_attached(report, to_int(_text(root, "attached_gpus")), len(elements))
    return report


def _check_attached(report: GpuReport, attached: int | None, found: int) -> None:
    if attached is not None and attached != found:
        report.warnings.append(
            f"nvidia-smi reports {attached} attached GPUs but lists {found}; "
            "only the listed ones are used"
        )


def _add_xml_gpu(report: GpuReport, index: int, element: ET.Element) -> None:
    uuid = _text(element, "uuid")
    if uuid is None:
        report.warnings.append(f"GPU {index} in nvidia-smi -q -x has no UUID; left out")
        return
    memory = to_bytes(_text(element, "fb_memory_usage/total"))
    if memory is None:
        report.warnings.append(f"GPU {index} ({uuid}) reports no memory total; counted as 0")
    report.gpus.append(xml_gpu(index, uuid, memory or 0, element))


def xml_gpu(index: int, uuid: str, memory: int, element: ET.Element) -> GpuDevice:
    """Build a GpuDevice from one ``<gpu>`` element of ``nvidia-smi -q -x``."""
    mig_enabled = (_text(element, "mig_mode/current_mig") or "").lower() == "enabled"
    bus_id = _text(element, "pci/pci_bus_id") or element.get("id")
    values = {
        "index": index,
        "uuid": uuid,
        "name": _text(element, "product_name"),
        "memory_bytes": memory or None,
        "memory_used_bytes": to_bytes(_text(element, "fb_memory_usage/used")),
        "minor_number": to_int(_text(element, "minor_number")),
        "pci_bus_id": normalize_bus_id(bus_id),
        "utilization_percent": to_percent(_text(element, "utilization/gpu_util")),
        "mig_enabled": mig_enabled,
        "mig_devices": xml_mig_devices(uuid, element) if mig_enabled else [],
    }
    sources = present_fields(values, Source.NVIDIA_SMI)
    values.update(name=values["name"] or "unknown NVIDIA GPU", memory_bytes=memory)
    return GpuDevice(**values, sources=sources)


def xml_mig_devices(gpu_uuid: str, element: ET.Element) -> list[MigDevice]:
    """Read ``<mig_devices>``, sorted by MIG device index.

    ``-q -x`` gives no MIG UUIDs or profile names: the UUID is the legacy
    ``MIG-<GPU UUID>/<GI>/<CI>`` form (still accepted by CUDA_VISIBLE_DEVICES) until
    ``nvidia-smi -L`` supplies the real one.
    """
    entries = element.findall("mig_devices/mig_device")
    entries.sort(key=lambda entry: to_int(_text(entry, "index")) or 0)
    devices = (xml_mig_device(gpu_uuid, entry) for entry in entries)
    return [device for device in devices if device is not None]


def xml_mig_device(gpu_uuid: str, entry: ET.Element) -> MigDevice | None:
    """Build a MigDevice from one ``<mig_device>``; None without instance ids or memory."""
    gi = to_int(_text(entry, "gpu_instance_id"))
    ci = to_int(_text(entry, "compute_instance_id"))
    memory = to_bytes(_text(entry, "fb_memory_usage/total"))
    if gi is None or ci is None or memory is None:
        return None
    return MigDevice(
        uuid=f"MIG-{gpu_uuid}/{gi}/{ci}",
        gpu_instance_id=gi,
        compute_instance_id=ci,
        memory_bytes=memory,
        sm_count=to_int(_text(entry, "device_attributes/shared/multiprocessor_count")),
    )
