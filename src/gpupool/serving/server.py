"""The built-in model server's HTTP interface (standard library only, besides the model's
framework).

- ``GET /health``: 200 ``{"status": "ok", ...}`` once the model is loaded; 503 while it
  loads, or with the reason it could not be loaded (also written to the replica's log).
- ``POST /predict`` with ``{"inputs": [[...], ...]}`` (a batch of rows of numbers):
  200 ``{"outputs": [...], "model": {"file", "kind", "sha256"}}``; a clear 4xx
  (``{"error": {"code", "message"}}``) for a body that is not such JSON, or inputs the model
  does not take.
- ``GET /``: what is served.

It listens on ``$GPUPOOL_LISTEN_HOST:$PORT`` (gpupool gives both to a listening job) and loads
the model in the background, so its health answers from the first moment.

It answers only requests that carry ``X-Gpupool-Replica-Token: $GPUPOOL_REPLICA_TOKEN`` (the
secret the platform started the replica with; its proxy and health checks send it): any
other caller — another process of the node, past /serve's checks — gets 403, health
included. Without that variable it does not start.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpupool.serving.models import InputError, LoadedModel, ModelError, find_model, load

MAX_BODY = 16 * 1024**2
DEFAULT_HOST = "127.0.0.1"
# as domain.deployments says them (this package uses the standard library only)
TOKEN_ENV = "GPUPOOL_REPLICA_TOKEN"
TOKEN_HEADER = "X-Gpupool-Replica-Token"


class ModelHolder:
    """The model once loaded, or why it could not be: shared by the server's threads."""

    def __init__(self) -> None:
        self.model: LoadedModel | None = None
        self.problem: str | None = None
        self.loaded = threading.Event()

    def load_from(self, model_dir: str | None) -> None:
        try:
            self.model = load(find_model(model_dir))
            print(f"gpupool.serving: loaded {self.model.path} ({self.model.kind})", flush=True)
        except ModelError as error:
            self.problem = str(error)
            print(f"gpupool.serving: error: {self.problem}", file=sys.stderr, flush=True)
        finally:
            self.loaded.set()


class Handler(BaseHTTPRequestHandler):
    """One request; the server's ``holder`` has the model."""

    server: ModelServer
    protocol_version = "HTTP/1.1"  # keep-alive: the platform's proxy reuses connections
    # an answer leaves in one write, at once: headers and body written apart would wait on
    # Nagle's algorithm for the client's delayed ACK (40 ms a request)
    wbufsize = -1
    disable_nagle_algorithm = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._allowed():
            return
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._health()
        elif path == "/":
            self._reply(200, self._about())
        else:
            self._error(404, "not_found", "this server answers GET /health, GET /, POST /predict")

    def do_POST(self) -> None:  # noqa: N802
        if not self._allowed():
            return
        if self.path.split("?", 1)[0] != "/predict":
            self._error(404, "not_found", "predictions are POSTed to /predict")
            return
        body = self._body()
        if body is None:
            return
        model = self.server.holder.model
        if model is None:
            self._error(503, "model_not_loaded", self._not_loaded())
            return
        try:
            outputs = model.predict(body)
        except InputError as error:
            self._error(422, "bad_inputs", f"the model does not take these inputs: {error}")
            return
        self._reply(200, {"outputs": outputs, "model": self._model_info(model)})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """No line per request: a replica's log is for what goes wrong."""

    def _allowed(self) -> bool:
        """Whether the request carries the replica's token (compared in constant time);
        403 answered when not (its body unread: the connection is closed)."""
        sent = (self.headers.get(TOKEN_HEADER) or "").encode()
        if hmac.compare_digest(sent, self.server.token.encode()):
            return True
        self.close_connection = True
        self._error(403, "forbidden", "only the platform's proxy may call this replica")
        return False

    def _health(self) -> None:
        if self.server.holder.model is not None:
            self._reply(200, {"status": "ok", "model": self._model_info(self.server.holder.model)})
        else:
            self._error(503, "model_not_loaded", self._not_loaded())

    def _not_loaded(self) -> str:
        holder = self.server.holder
        return holder.problem or "the model is still loading: try again in a moment"

    def _body(self) -> list[Any] | None:
        """The request's inputs, or None once an error was answered."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._error(413, "body_too_large", f"send a JSON body of at most {MAX_BODY} bytes")
            return None
        try:
            data = json.loads(self.rfile.read(length) or b"null")
        except (UnicodeDecodeError, ValueError):
            self._error(400, "bad_json", 'the body is not JSON: send {"inputs": [[1.0, 2.0]]}')
            return None
        inputs = data.get("inputs") if isinstance(data, dict) else None
        if not isinstance(inputs, list) or not inputs:
            self._error(400, "bad_inputs", 'send {"inputs": [[...], ...]}: a batch of rows')
            return None
        return inputs

    def _about(self) -> dict[str, Any]:
        model = self.server.holder.model
        return {
            "server": "gpupool.serving",
            "model": self._model_info(model) if model else None,
            "problem": self.server.holder.problem,
            "endpoints": ["GET /health", "POST /predict"],
        }

    @staticmethod
    def _model_info(model: LoadedModel) -> dict[str, str]:
        return {"file": os.path.basename(model.path), "kind": model.kind, "sha256": model.sha256}

    def _error(self, status: int, code: str, message: str) -> None:
        self._reply(status, {"error": {"code": code, "message": message}})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:  # the client is told, not left to find a closed socket
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], holder: ModelHolder, token: str) -> None:
        if not token:
            raise ValueError("a replica's server needs its token")
        super().__init__(address, Handler)
        self.holder, self.token = holder, token


def main() -> None:
    host = os.environ.get("GPUPOOL_LISTEN_HOST") or DEFAULT_HOST
    port = os.environ.get("PORT")
    if not port or not port.isdigit():
        sys.exit("gpupool.serving: PORT is not set: run it as a deployment (gpupool deploy)")
    token = os.environ.get(TOKEN_ENV)
    if not token:
        sys.exit(f"gpupool.serving: {TOKEN_ENV} is not set: run it as a deployment")
    holder = ModelHolder()
    server = ModelServer((host, int(port)), holder, token)
    model_dir = os.environ.get("GPUPOOL_MODEL_DIR")
    threading.Thread(target=holder.load_from, args=(model_dir,), daemon=True).start()
    print(f"gpupool.serving: listening on {host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
