"""What the nodes page is built from: each node's topology matrix (the same cells as
``nvidia-smi topo -m``, over real captures), what its jobs hold, the pool's summary (a drained
or down node's GPUs are not free) and the nodes by fabric group."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpupool.discovery.declared import parse_declared_links
from gpupool.discovery.nvidia_smi import nic_affinity, parse_topo_matrix
from gpupool.domain.inventory import GpuDevice, GpuLink, LinkKind, NodeInventory, Source
from gpupool.domain.nodes import NodeState
from gpupool.domain.units import GiB
from gpupool.domain.views import GpuView, HolderView, NodeView
from gpupool.services.cluster._pool import fabric_groups, summarize
from gpupool.services.cluster._views import HostHeld, topology_view, usage_view

CAPTURES = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "captures"
TOPO_CAPTURES = [
    "topo-m_dgx-a100_8x-a100-sxm4-40gb_10-nic_525.105.17_oyanghd.txt",
    "topo-m_8x-quadro-rtx6000_pcie-switches_tempura.txt",
    "topo-m_asus-esc8000a-e12_4x-rtx6000ada_4-nic_575.51.03_stelline.txt",
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def gpus(count: int, affinity: dict[int, dict[str, LinkKind]] | None = None) -> list[GpuDevice]:
    return [
        GpuDevice(
            index=i,
            uuid=f"GPU-{i}",
            name="A100",
            memory_bytes=80 * GiB,
            nic_affinity=(affinity or {}).get(i, {}),
        )
        for i in range(count)
    ]


def inventory(devices: list[GpuDevice], links: list[GpuLink] = ()) -> NodeInventory:
    return NodeInventory(name="n", cpus=64, memory_bytes=256 * GiB, gpus=devices, links=links)


@pytest.mark.parametrize("capture", TOPO_CAPTURES)
def test_the_matrix_shows_what_nvidia_smi_topo_m_printed(capture: str) -> None:
    path = CAPTURES / capture
    if not path.is_file():
        pytest.skip(f"the real captures folder {CAPTURES} is absent (../shared/data)")
    text = path.read_text()
    topo = parse_topo_matrix(text)
    count = len(topo.numa_affinity)
    affinity = nic_affinity(topo)

    shown = topology_view(inventory(gpus(count, affinity), topo.links))

    printed = printed_matrix(text, count)
    nic_columns = [topo.nic_names.get(column, column) for column in printed["nics"]]
    assert shown.reported and shown.gpus == list(range(count))
    assert sorted(shown.nics) == sorted(nic_columns)
    order = [nic_columns.index(nic) for nic in shown.nics]  # the view sorts them by name
    expected = [row[:count] + [row[count + i] for i in order] for row in printed["rows"]]
    assert shown.cells == expected


def printed_matrix(text: str, count: int) -> dict:
    """The GPU rows of a topo -m capture as printed: GPU columns, then NIC columns."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    start = next(i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line))
    split = (lambda line: line.split("\t")) if "\t" in lines[start] else str.split
    header = [cell.strip() for cell in split(lines[start]) if cell.strip()]
    nics = [cell for cell in header if cell.startswith("NIC")]
    rows = []
    for line in lines[start + 1 : start + 1 + count]:
        cells = [cell.strip() for cell in split(line)][1:]
        rows.append(cells[: count + len(nics)])
    return {"nics": nics, "rows": rows}


def test_declared_links_make_a_symmetric_matrix_and_unknown_pairs_stay_blank() -> None:
    links = parse_declared_links("0-1:NV4,2-3:PIX,1-2:sys", 4)

    shown = topology_view(inventory(gpus(4), links))

    assert shown.cells == [
        ["X", "NV4", "", ""],
        ["NV4", "X", "SYS", ""],
        ["", "SYS", "X", "PIX"],
        ["", "", "PIX", "X"],
    ]
    assert shown.nics == [] and shown.reported


def test_the_best_of_two_links_between_a_pair_is_shown_and_nic_columns_sort_naturally() -> None:
    links = [
        GpuLink(a=0, b=1, kind=LinkKind.PHB, source=Source.NVML),
        GpuLink(a=1, b=0, kind=LinkKind.NVLINK, nvlinks=0, source=Source.NVML),
    ]
    affinity = {0: {"mlx5_10": LinkKind.SYS, "mlx5_2": LinkKind.PIX}, 1: {"mlx5_2": LinkKind.NODE}}

    shown = topology_view(inventory(gpus(2, affinity), links))

    assert shown.nics == ["mlx5_2", "mlx5_10"]
    assert shown.cells == [["X", "NV", "PIX", "SYS"], ["NV", "X", "NODE", ""]]


def test_a_node_that_reports_no_link_says_so() -> None:
    shown = topology_view(inventory(gpus(2)))
    assert not shown.reported and shown.cells == [["X", ""], ["", "X"]]


def test_usage_is_what_jobs_hold_against_what_the_node_offers() -> None:
    held = [gpu_view("GPU-0", 1.0), gpu_view("GPU-1", 0.5), gpu_view("GPU-2", 0.0)]

    usage = usage_view(inventory(gpus(3)), held, HostHeld(cpus=16.0, memory_bytes=64 * GiB))

    assert (usage.gpus_held, usage.gpus, usage.gpu_share) == (1.5, 3, 0.5)
    assert (usage.cpus_held, usage.cpus, usage.cpu_share) == (16.0, 64, 0.25)
    assert (usage.memory_held_bytes, usage.memory_share) == (64 * GiB, 0.25)
    assert (
        usage_view(NodeInventory(name="n", cpus=0, memory_bytes=0), [], HostHeld()).cpu_share == 0
    )


def test_a_drained_or_down_nodes_idle_gpus_are_not_free() -> None:
    shown = [
        node_view("a", [1.0, 0.25], fabric="ib-0"),
        node_view("b", [0.5, 0.0], drain=True, fabric="ib-0"),
        node_view("c", [0.0], state=NodeState.DOWN, model="H100"),
        node_view("d", [0.0, 0.0], drain=True, state=NodeState.DOWN, fabric="eth"),
    ]

    summary = summarize(shown)

    assert (summary.nodes, summary.up, summary.drained, summary.down) == (4, 1, 1, 2)
    assert (summary.gpus, summary.in_use, summary.free, summary.unavailable) == (7, 1.75, 0.75, 4.5)
    assert [(m.model, m.gpus, m.in_use, m.free) for m in summary.by_model] == [
        ("A100", 6, 1.75, 0.75),
        ("H100", 1, 0.0, 0.0),
    ]


def test_nodes_are_grouped_by_fabric_group_with_no_group_last() -> None:
    shown = [
        node_view("a", [0.0]),
        node_view("b", [0.0, 0.0], fabric="roce-1"),
        node_view("c", [0.0] * 4, fabric="ib-0"),
        node_view("d", [0.0], fabric="roce-1"),
    ]

    groups = fabric_groups(shown)

    assert [(g.name, [n.name for n in g.nodes], g.gpus) for g in groups] == [
        ("ib-0", ["c"], 4),
        ("roce-1", ["b", "d"], 3),
        (None, ["a"], 1),
    ]
    assert fabric_groups([]) == []


def gpu_view(uuid: str, used: float, model: str = "A100") -> GpuView:
    holders = [] if not used else [holder(used)]
    return GpuView(
        uuid=uuid,
        index=0,
        model=model,
        memory_bytes=80 * GiB,
        used_share=used,
        used_memory_bytes=0,
        utilization_percent=None,
        holders=holders,
        domain=0,
    )


def holder(share: float) -> HolderView:
    return HolderView(
        job_id=1, job_name=None, user="u", team="t", share=share, memory_bytes=0, other_team=False
    )


def node_view(
    name: str,
    used: list[float],
    drain: bool = False,
    state: NodeState = NodeState.UP,
    fabric: str | None = None,
    model: str = "A100",
) -> NodeView:
    devices = [gpu_view(f"GPU-{name}-{i}", share, model) for i, share in enumerate(used)]
    inv = inventory(gpus(len(used)))
    return NodeView(
        name=name,
        schedulable=state is NodeState.UP and not drain,
        state=state,
        drain=drain,
        drain_reason=None,
        joined_at=0.0,
        down_at=None,
        address=None,
        fabric_group=fabric,
        last_seen_at=0.0,
        cpus=64,
        memory_bytes=256 * GiB,
        gpus=devices,
        inventory=inv,
        usage=usage_view(inv, devices, HostHeld()),
        topology=topology_view(inv),
    )
