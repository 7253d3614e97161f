"""A model version of a job that ran on a Ray node: the node's agent packs the job's outputs
on its own disk, the server's Ray executor fetches the pack in chunks and the agent removes
it; a refusal on the node comes back as the same error, an unreachable node as a 503. The
agent is called in process, through a stand-in for the bridge that calls its methods."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from gpupool.cluster import agent as agent_module
from gpupool.cluster.agent import NodeAgent
from gpupool.cluster.client import AgentUnavailable
from gpupool.cluster.executor import RayExecutor
from gpupool.domain.code import CodeLimits
from gpupool.errors import BadModelPath, NoModelFiles, OutputsUnreachable
from gpupool.executors.outputs import index


class Bridge:
    """Calls the agent of node "n1" as the bridge would (JSON-ready arguments and answers)."""

    def __init__(self, agent: NodeAgent) -> None:
        self.agent, self.calls = agent, []

    def call(self, node: str, method: str, timeout: float = 30.0, **args: Any) -> Any:
        self.calls.append(method)
        if node != "n1":
            raise AgentUnavailable(f"no agent on {node}")
        return getattr(self.agent, method)(**args)

    def close(self) -> None:
        pass


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RayExecutor, Bridge, Path]:
    monkeypatch.setenv("GPUPOOL_DATA_DIR", str(tmp_path / "node"))
    monkeypatch.setenv("GPUPOOL_NODE_NAME", "n1")
    monkeypatch.setattr(agent_module, "PACK_CHUNK", 1000)  # several chunks per pack
    bridge = Bridge(NodeAgent())
    outputs = tmp_path / "node" / "jobs" / "7" / "outputs"
    (outputs / "model").mkdir(parents=True)
    return RayExecutor(bridge, tmp_path / "server-jobs"), bridge, outputs  # type: ignore[arg-type]


def test_the_server_fetches_a_pack_made_on_the_node_in_chunks(node, tmp_path: Path) -> None:  # noqa: ANN001
    executor, bridge, outputs = node
    weights = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(200))  # no repeats
    (outputs / "model" / "w.bin").write_bytes(weights)
    into = io.BytesIO()

    executor.pack_outputs(7, "n1", "model", CodeLimits(), into)

    files = index(io.BytesIO(into.getvalue()), CodeLimits())
    assert [(f.path, f.size) for f in files] == [("w.bin", len(weights))]
    assert bridge.calls.count("read_pack") > 1 and bridge.calls[-1] == "drop_pack"
    assert not list((tmp_path / "node" / "models" / "outgoing").iterdir())


def test_a_refusal_on_the_node_is_the_same_error_on_the_server(node) -> None:  # noqa: ANN001
    executor, _, outputs = node
    (outputs / "model" / "leak").symlink_to("/etc/passwd")
    with pytest.raises(BadModelPath, match="leak"):
        executor.pack_outputs(7, "n1", "model", CodeLimits(), io.BytesIO())
    with pytest.raises(NoModelFiles):
        executor.pack_outputs(8, "n1", "", CodeLimits(), io.BytesIO())


def test_a_node_that_cannot_be_reached_is_a_503(node) -> None:  # noqa: ANN001
    executor, _, _ = node
    with pytest.raises(OutputsUnreachable, match="n2") as raised:
        executor.pack_outputs(7, "n2", "", CodeLimits(), io.BytesIO())
    assert raised.value.status == 503
