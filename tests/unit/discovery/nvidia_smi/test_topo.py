"""``nvidia-smi topo -m`` parsing over the real captures."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from gpupool.discovery.nvidia_smi import (
    TopoMatrix,
    apply_nic_affinity,
    nic_affinity,
    parse_topo_matrix,
    topo_link,
)
from gpupool.discovery.report import GpuReport
from gpupool.domain.inventory import GpuDevice, LinkKind, Source

DGX = "topo-m_dgx-a100_8x-a100-sxm4-40gb_10-nic_525.105.17_oyanghd.txt"
TEMPURA = "topo-m_8x-quadro-rtx6000_pcie-switches_tempura.txt"
ASUS = "topo-m_asus-esc8000a-e12_4x-rtx6000ada_4-nic_575.51.03_stelline.txt"
H100_EXPORTER = "nvsmi-capture_h100-80gb-hbm3_mig_590.48.01_nvidia_gpu_exporter.txt"


def _kinds(topo) -> dict[tuple[int, int], LinkKind]:
    return {(link.a, link.b): link.kind for link in topo.links}


def test_dgx_a100_nv12_between_every_gpu_pair(captures: Path) -> None:
    text = (captures / DGX).read_text()
    assert "\t" in text
    topo = parse_topo_matrix(text)
    assert [(link.a, link.b) for link in topo.links] == list(combinations(range(8), 2))
    assert {(link.kind, link.nvlinks, link.source) for link in topo.links} == {
        (LinkKind.NVLINK, 12, Source.NVIDIA_SMI)
    }
    assert topo.warnings == []


def test_dgx_a100_affinity_and_nics(captures: Path) -> None:
    topo = parse_topo_matrix((captures / DGX).read_text())
    assert topo.numa_affinity == {0: 3, 1: 3, 2: 1, 3: 1, 4: 7, 5: 7, 6: 5, 7: 5}
    assert topo.cpu_affinity[0] == "48-63,176-191"
    assert topo.cpu_affinity[6] == "80-95,208-223"
    assert topo.nic_names["NIC9"] == "mlx5_9"
    assert len(topo.nic_names) == 10
    assert topo.gpu_nics[0]["NIC0"] == "PXB"
    assert topo.gpu_nics[0]["NIC2"] == "SYS"
    assert topo.gpu_nics[7]["NIC7"] == "PXB"
    assert all(link.a < link.b <= 7 for link in topo.links)  # no NIC row became a GPU


def test_tempura_pcie_switch_structure(captures: Path) -> None:
    text = (captures / TEMPURA).read_text()
    assert "\x1b[4m" in text  # the real bytes carry ANSI underline escapes
    topo = parse_topo_matrix(text)
    kinds = _kinds(topo)
    assert len(kinds) == 28
    groups = [{0, 1, 6, 7}, {2, 3, 4, 5}]
    for (a, b), kind in kinds.items():
        same_switch = any({a, b} <= group for group in groups)
        assert kind is (LinkKind.PIX if same_switch else LinkKind.PXB), (a, b)
    assert kinds[(0, 1)] is LinkKind.PIX
    assert kinds[(0, 2)] is LinkKind.PXB
    assert topo.numa_affinity == dict.fromkeys(range(8), 0)  # despite the stray empty tab cell
    assert topo.cpu_affinity[5] == "0-19"
    assert topo.gpu_nics == {}


def test_asus_space_separated_node_and_sys(captures: Path) -> None:
    text = (captures / ASUS).read_text()
    assert "\t" not in text
    topo = parse_topo_matrix(text)
    assert _kinds(topo) == {
        (0, 1): LinkKind.NODE,
        (0, 2): LinkKind.SYS,
        (0, 3): LinkKind.SYS,
        (1, 2): LinkKind.SYS,
        (1, 3): LinkKind.SYS,
        (2, 3): LinkKind.NODE,
    }
    assert topo.numa_affinity == {0: 0, 1: 0, 2: 1, 3: 1}
    assert topo.cpu_affinity == {0: "0-31", 1: "0-31", 2: "32-63", 3: "32-63"}
    assert topo.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(4)}
    assert topo.gpu_nics[2] == {"NIC0": "SYS", "NIC1": "SYS", "NIC2": "NODE", "NIC3": "NODE"}


def test_single_gpu_exporter_capture(captures: Path, section) -> None:
    topo = parse_topo_matrix(section(captures / H100_EXPORTER, "nvidia-smi topo -m"))
    assert topo.links == []
    assert topo.numa_affinity == {0: 0}
    assert topo.cpu_affinity == {0: "0-19"}


def test_output_without_matrix_gives_a_warning() -> None:
    topo = parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate")
    assert topo.links == []
    assert topo.warnings == ["nvidia-smi topo -m output has no GPU0 column"]


def test_link_codes() -> None:
    assert topo_link(0, 1, "NV4").nvlinks == 4
    assert topo_link(0, 1, "PHB").kind is LinkKind.PHB
    assert topo_link(0, 1, "SOC").kind is LinkKind.SYS  # pre-2017 name of SYS
    assert topo_link(0, 1, "NVLINK") is None
    assert topo_link(0, 1, "???") is None


def test_dgx_a100_nic_affinity_by_rdma_device_name(captures: Path) -> None:
    affinity = nic_affinity(parse_topo_matrix((captures / DGX).read_text()))
    assert sorted(affinity) == list(range(8))
    assert affinity[0] == {
        "mlx5_0": LinkKind.PXB,
        "mlx5_1": LinkKind.PXB,
        **{f"mlx5_{i}": LinkKind.SYS for i in range(2, 10)},
    }
    assert {n for n, kind in affinity[5].items() if kind is LinkKind.PXB} == {"mlx5_4", "mlx5_5"}


def test_asus_nic_affinity_node_and_sys(captures: Path) -> None:
    affinity = nic_affinity(parse_topo_matrix((captures / ASUS).read_text()))
    assert affinity[1] == {
        "mlx5_0": LinkKind.NODE,
        "mlx5_1": LinkKind.NODE,
        "mlx5_2": LinkKind.SYS,
        "mlx5_3": LinkKind.SYS,
    }


def test_nic_affinity_without_legend_keeps_the_column_label() -> None:
    topo = TopoMatrix(gpu_nics={0: {"NIC0": "PIX", "NIC1": "SOC", "NIC2": "NV4", "NIC3": "?"}})
    assert nic_affinity(topo) == {0: {"NIC0": LinkKind.PIX, "NIC1": LinkKind.SYS}}
    assert nic_affinity(parse_topo_matrix("no matrix")) == {}


def test_nic_affinity_joins_an_nvml_report_and_a_topo_report(captures: Path) -> None:
    text = (captures / DGX).read_text()
    report = GpuReport(
        source=Source.NVML,
        gpus=[GpuDevice(index=i, uuid=f"GPU-{i}", name="A100", memory_bytes=1) for i in (0, 7)],
    )
    asked: list[list[str]] = []
    apply_nic_affinity(report, lambda args: asked.append(list(args)) or text)
    assert asked == [["topo", "-m"]]
    assert report.gpus[1].nic_affinity["mlx5_7"] is LinkKind.PXB
    assert report.gpus[1].sources["nic_affinity"] is Source.NVIDIA_SMI
    empty = GpuReport(source=Source.NVML)
    apply_nic_affinity(empty, lambda args: asked.append(list(args)) or text)
    assert len(asked) == 1  # no GPUs: nothing to ask
    untouched = GpuReport(
        source=Source.NVML, gpus=[report.gpus[0].model_copy(update={"nic_affinity": {}})]
    )
    apply_nic_affinity(untouched, lambda args: None)  # no nvidia-smi
    assert untouched.gpus[0].nic_affinity == {}
