"""A deployment replica for the security tests: it serves on $PORT at $GPUPOOL_LISTEN_HOST and
reports what reached it and what it can reach. Run as a job: ``python -c SOURCE`` (a sandbox
shows it no file of the repository); standard library only.

- ``GET /health``: 200.
- ``GET /echo``: the request as it arrived: path, headers, and its model directory.
- ``POST /probe`` with ``{"read": [paths], "list": [paths], "write": [paths]}``: what each
  attempt got, ``"read"``, ``"listed: [names]"``, ``"wrote"`` or ``"blocked: <error>"``.
"""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def source() -> str:
    """This program's text, to run as ``python -c`` (only the tests read it)."""
    return Path(__file__).read_text()


def attempt(kind: str, path: str) -> str:
    try:
        if kind == "read":
            with open(path, "rb") as f:
                f.read(16)
            return "read"
        if kind == "list":
            return f"listed: {sorted(os.listdir(path))}"
        with open(path, "w") as f:
            f.write("evil")
        return "wrote"
    except Exception as error:  # noqa: BLE001 - every way of failing is "blocked"
        return f"blocked: {type(error).__name__}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            self.reply({"status": "ok"})
        else:
            model = os.environ.get("GPUPOOL_MODEL_DIR")
            files = sorted(os.listdir(model)) if model and os.path.isdir(model) else []
            headers = [[name, value] for name, value in self.headers.items()]
            self.reply({"path": self.path, "headers": headers, "model_dir": model, "files": files})

    def do_POST(self) -> None:  # noqa: N802
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        found = {
            f"{kind} {path}": attempt(kind, path)
            for kind in ("read", "list", "write")
            for path in asked.get(kind, [])
        }
        self.reply(found)

    def reply(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    address = (os.environ.get("GPUPOOL_LISTEN_HOST", "127.0.0.1"), int(os.environ["PORT"]))
    ThreadingHTTPServer(address, Handler).serve_forever()
