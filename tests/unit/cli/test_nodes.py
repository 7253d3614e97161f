"""What `gpupool nodes` prints, from API answers (no server)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpupool.cli import nodes


def printed(monkeypatch: pytest.MonkeyPatch, module: object) -> io.StringIO:
    """Send the module's stdout console to a string."""
    text = io.StringIO()
    monkeypatch.setattr(module, "out", Console(file=text, width=200, highlight=False))
    return text


def gpu(index: int, domain: int) -> dict:
    return {
        "uuid": f"GPU-{index}",
        "index": index,
        "model": "H100",
        "memory_bytes": 80 << 30,
        "used_share": 0,
        "holders": [],
        "domain": domain,
    }


def test_nodes_show_each_gpu_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    text = printed(monkeypatch, nodes)
    node = {"name": "n1", "schedulable": True, "cpus": 8, "memory_bytes": 1 << 30}
    nodes.print_node(node | {"gpus": [gpu(0, 0), gpu(1, 0), gpu(2, 2), gpu(3, 2)]})
    words = [line.split() for line in text.getvalue().splitlines()]
    assert words[1][:2] == ["state:", "up"]
    assert words[2][:2] == ["GPU", "DOMAIN"]
    assert [w[:2] for w in words[3:]] == [["0", "0"], ["1", "0"], ["2", "2"], ["3", "2"]]


def test_nodes_say_how_each_node_stands_in_the_pool() -> None:
    up = {"state": "up", "drain": False, "joined_at": None, "fabric_group": None}
    assert nodes.life_text(up) == "state: up · joined - · fabric -"
    drained = up | {"drain": True, "drain_reason": "disk swap", "fabric_group": "ib-0"}
    drained |= {"address": "10.0.0.2"}
    assert nodes.life_text(drained) == (
        "state: up · drained (disk swap) · joined - · fabric ib-0 · address 10.0.0.2"
    )
    down = nodes.life_text(up | {"state": "down", "down_at": 0.0})
    assert down.startswith("state: down since ") and "since -" not in down
