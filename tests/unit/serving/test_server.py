"""The built-in model server, in this process: health once the model is loaded, predictions of
a TorchScript model, clear 4xx for bad bodies and inputs, a missing model said in the log
and in a failing health, and 403 for any request without the replica's token."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpupool.domain.deployments import REPLICA_TOKEN_ENV, REPLICA_TOKEN_HEADER
from gpupool.serving.server import TOKEN_ENV, TOKEN_HEADER, ModelHolder, ModelServer

torch = pytest.importorskip("torch")
TOKEN = "the-replica-token"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TorchScript model that doubles the sum of each row."""
    directory = tmp_path_factory.mktemp("model")
    layer = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(2.0)
    torch.jit.script(layer).save(str(directory / "model.pt"))
    return directory


def serving(model_dir: Path | None) -> Iterator[httpx.Client]:
    holder = ModelHolder()
    holder.load_from(str(model_dir) if model_dir else None)
    server = ModelServer(("127.0.0.1", 0), holder, TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    with httpx.Client(base_url=base_url, headers={TOKEN_HEADER: TOKEN}) as client:
        yield client
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def client(model_dir: Path) -> Iterator[httpx.Client]:
    yield from serving(model_dir)


def test_a_loaded_model_is_healthy_and_predicts(client: httpx.Client) -> None:
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["model"]["kind"] == "torchscript"
    answer = client.post("/predict", json={"inputs": [[1, 2, 3], [0, 0, 1]]})
    assert answer.status_code == 200
    assert answer.json()["outputs"] == [[12.0], [2.0]]
    assert answer.json()["model"]["sha256"] == health.json()["model"]["sha256"]


@pytest.mark.parametrize(
    "token", [None, "", "the-replica-tokeN", TOKEN + "x", "é".encode("latin-1")]
)
def test_a_request_without_the_replica_token_is_refused(
    client: httpx.Client, token: str | bytes | None
) -> None:
    headers = {TOKEN_HEADER: token} if token is not None else {}
    with httpx.Client(base_url=client.base_url, headers=headers) as other:
        for answer in (
            other.get("/health"),
            other.get("/"),
            other.post("/predict", json={"inputs": [[1, 2, 3]]}),
        ):
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"]["code"] == "forbidden"
            assert TOKEN not in answer.text


def test_the_server_uses_the_platforms_names_and_needs_a_token() -> None:
    assert (TOKEN_ENV, TOKEN_HEADER) == (REPLICA_TOKEN_ENV, REPLICA_TOKEN_HEADER)
    with pytest.raises(ValueError):
        ModelServer(("127.0.0.1", 0), ModelHolder(), "")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"not json", 400, "bad_json"),
        (b'{"rows": [[1]]}', 400, "bad_inputs"),
        (b'{"inputs": []}', 400, "bad_inputs"),
        (b'{"inputs": [[1, "a", 3]]}', 422, "bad_inputs"),
        (b'{"inputs": [[1, 2]]}', 422, "bad_inputs"),
    ],
)
def test_bad_bodies_and_inputs_are_refused_clearly(
    client: httpx.Client, body: bytes, status: int, code: str
) -> None:
    answer = client.post("/predict", content=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code and answer.json()["error"]["message"]


def test_a_missing_model_fails_health_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "weights.bin").write_bytes(b"x")
    for client in serving(tmp_path):
        health = client.get("/health")
        assert health.status_code == 503
        assert "no model.pt (TorchScript) or model.onnx" in health.json()["error"]["message"]
        assert client.post("/predict", json={"inputs": [[1]]}).status_code == 503
    assert "weights.bin" in capsys.readouterr().err


def test_an_onnx_model_is_served_with_onnxruntime(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    (tmp_path / "model.onnx").write_bytes(identity_onnx())
    for client in serving(tmp_path):
        assert client.get("/health").json()["model"]["kind"] == "onnx"
        answer = client.post("/predict", json={"inputs": [[1, 2], [3, 4]]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == [[1.0, 2.0], [3.0, 4.0]]
        assert client.post("/predict", json={"inputs": [[1, 2, 3]]}).status_code == 422


def identity_onnx() -> bytes:
    """An ONNX model (opset 13) y = Identity(x), x a float tensor [n, 2], written as protobuf
    by hand: the onnx package is not needed to serve a model, so the tests do without it."""
    shape = _field(2, _field(1, _field(2, b"n")) + _field(1, _varint_field(1, 2)))
    tensor = _field(1, _varint_field(1, 1) + shape)  # elem_type 1: float
    node = _field(1, b"x") + _field(2, b"y") + _field(4, b"Identity")
    graph = _field(1, node) + _field(2, b"g")
    graph += _field(11, _field(1, b"x") + _field(2, tensor))
    graph += _field(12, _field(1, b"y") + _field(2, tensor))
    opset = _field(1, b"") + _varint_field(2, 13)
    return _varint_field(1, 7) + _field(7, graph) + _field(8, opset)


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data
