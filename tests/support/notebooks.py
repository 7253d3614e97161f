"""A small Jupyter client for tests and benchmarks: it reaches a notebook's JupyterLab
through the platform's proxy (``/notebooks/<id>/``) with an API token, starts kernels and
runs code in them over the kernel's WebSocket (the Jupyter messaging protocol, as JSON)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
from websockets.sync.client import connect

from tests.support.waiting import wait_for


class Lab:
    """The JupyterLab of notebook ``notebook_id`` on ``server`` (its URL), as ``token``'s
    holder reaches it through the proxy (``scheme`` "token": JupyterLab itself, directly
    on its own port, with its own token)."""

    def __init__(self, server: str, notebook_id: int, token: str, scheme: str = "Bearer") -> None:
        self.base = f"{server}/notebooks/{notebook_id}"
        self.headers = {"Authorization": f"{scheme} {token}"}
        self.http = httpx.Client(headers=self.headers, timeout=30, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def get(self, path: str) -> httpx.Response:
        return self.http.get(f"{self.base}/{path}")

    def answering(self, timeout: float = 90) -> dict[str, Any]:
        """Wait until JupyterLab answers through the proxy; its /api/status."""

        def status() -> dict[str, Any] | None:
            try:
                answer = self.get("api/status")
            except httpx.TransportError:  # not listening yet (JupyterLab on its own port)
                return None
            return answer.json() if answer.status_code == 200 else None

        return wait_for(status, timeout, "the notebook's JupyterLab to answer", 0.2)

    def start_kernel(self) -> str:
        answer = self.http.post(f"{self.base}/api/kernels", json={"name": "python3"})
        assert answer.status_code == 201, answer.text
        return answer.json()["id"]

    def delete_kernel(self, kernel_id: str) -> None:
        assert self.http.delete(f"{self.base}/api/kernels/{kernel_id}").status_code == 204

    def channels_url(self, kernel_id: str) -> str:
        return "ws" + self.base.removeprefix("http") + f"/api/kernels/{kernel_id}/channels"

    def run(self, kernel_id: str, code: str, timeout: float = 60) -> str:
        """Run ``code`` in the kernel; what it printed (its stdout and stderr), once it is
        idle again. An error in the code fails with its traceback."""
        with connect(
            self.channels_url(kernel_id), additional_headers=self.headers, open_timeout=timeout
        ) as socket:
            request = execute_request(code)
            socket.send(json.dumps(request))
            return _collect(socket, request["header"]["msg_id"], timeout)

    def put_file(self, path: str, text: str) -> None:
        body = {"type": "file", "format": "text", "content": text}
        answer = self.http.put(f"{self.base}/api/contents/{path}", json=body)
        assert answer.status_code in (200, 201), answer.text

    def read_file(self, path: str) -> str | None:
        answer = self.get(f"api/contents/{path}?content=1&type=file&format=text")
        return answer.json()["content"] if answer.status_code == 200 else None


def execute_request(code: str) -> dict[str, Any]:
    header = {
        "msg_id": uuid.uuid4().hex,
        "session": uuid.uuid4().hex,
        "username": "test",
        "msg_type": "execute_request",
        "version": "5.3",
        "date": datetime.now(UTC).isoformat(),
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    return {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
        "buffers": [],
    }


def _collect(socket: Any, msg_id: str, timeout: float) -> str:
    printed: list[str] = []
    while True:
        message = json.loads(socket.recv(timeout=timeout))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "stream":
            printed.append(content["text"])
        elif kind == "error":
            raise AssertionError("\n".join(content.get("traceback", [])))
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(printed)
