"""Loading a model version's file and running it: TorchScript or ONNX.

Each loader imports its framework only when used, so a replica of an ONNX model never pays
for torch's import, and a missing framework is a clear error in the replica's log.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any

TORCHSCRIPT = "model.pt"
ONNX = "model.onnx"
CHUNK = 1 << 20


class ModelError(Exception):
    """The model cannot be loaded (its file is missing, unreadable or of a wrong kind)."""


class InputError(Exception):
    """The inputs do not fit the model (their shape or type)."""


class LoadedModel:
    """A model ready to answer: ``predict`` takes nested lists of numbers, returns lists."""

    def __init__(self, path: str, run: Callable[[Any], Any]) -> None:
        self.path = path
        self.kind = "onnx" if path.endswith(".onnx") else "torchscript"
        self.sha256 = _sha256(path)
        self._run = run
        self._lock = threading.Lock()  # one prediction at a time: frameworks use the cores

    def predict(self, inputs: list[Any]) -> Any:
        with self._lock:
            return self._run(inputs)


def find_model(model_dir: str | None) -> str:
    """The path of ``model.pt`` or ``model.onnx`` in ``model_dir``; ModelError saying what
    is missing."""
    if not model_dir:
        raise ModelError(
            "GPUPOOL_MODEL_DIR is not set: the built-in server serves a registered model "
            "(gpupool deploy NAME:VERSION); give the deployment a model, or a command of its own"
        )
    for name in (TORCHSCRIPT, ONNX):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return path
    try:
        found = sorted(os.listdir(model_dir))[:20]
    except OSError as error:
        raise ModelError(f"cannot read the model's directory {model_dir}: {error}") from error
    raise ModelError(
        f"no {TORCHSCRIPT} (TorchScript) or {ONNX} in the model's files ({model_dir} holds: "
        f"{', '.join(found) or 'nothing'}): register a version whose files hold one, or deploy "
        "with a command of your own (gpupool deploy NAME -- CMD)"
    )


def load(path: str) -> LoadedModel:
    """The model at ``path``, ready to answer; ModelError when it cannot be loaded."""
    loader = _load_onnx if path.endswith(".onnx") else _load_torchscript
    try:
        return LoadedModel(path, loader(path))
    except ModelError:
        raise
    except Exception as error:  # any framework's own error: the file is not a usable model
        raise ModelError(f"cannot load {path}: {type(error).__name__}: {error}") from error


def _load_torchscript(path: str) -> Callable[[Any], Any]:
    try:
        import torch
    except ImportError as error:
        raise ModelError(f"{path} is a TorchScript model, and torch is not installed") from error
    module = torch.jit.load(path, map_location="cpu")
    module.eval()

    def run(inputs: Any) -> Any:
        try:
            tensor = torch.tensor(inputs, dtype=torch.float32)
        except (TypeError, ValueError) as error:
            raise InputError(f"inputs are not a rectangular array of numbers: {error}") from error
        try:
            with torch.no_grad():
                return module(tensor).tolist()
        except RuntimeError as error:  # a shape the model does not take
            raise InputError(_what_failed(error)) from error

    return run


def _load_onnx(path: str) -> Callable[[Any], Any]:
    try:
        import numpy
        import onnxruntime
    except ImportError as error:
        raise ModelError(
            f"{path} is an ONNX model, and onnxruntime is not installed: install gpupool's "
            "'serving' extra (pip install 'gpupool[serving]') on the node"
        ) from error
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(inputs: Any) -> Any:
        try:
            array = numpy.asarray(inputs, dtype=numpy.float32)
        except (TypeError, ValueError) as error:
            raise InputError(f"inputs are not a rectangular array of numbers: {error}") from error
        try:
            return session.run(None, {name: array})[0].tolist()
        except Exception as error:  # onnxruntime's own (InvalidArgument...): a bad shape
            raise InputError(_what_failed(error)) from error

    return run


def _what_failed(error: BaseException) -> str:
    """The line of a framework's error that says what failed (TorchScript's last one, after
    its traceback of the model's code)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else type(error).__name__


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
