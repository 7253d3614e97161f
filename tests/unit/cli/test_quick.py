"""`gpupool ls` without Typer: its quick parser takes the options as the Typer command does,
or leaves them to Typer; and a `gpupool ls` loads neither Typer nor Rich."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from typer.core import TyperCommand

from gpupool.cli.listing import list_jobs
from gpupool.cli.main import COMMANDS
from gpupool.cli.output import Output
from gpupool.cli.quick import FLAG, NUMBER, OUTPUT, POSITIVE, QUICK, TEXT, TEXTS, quick

NOT_LOADED = ("typer", "click", "rich", "pydantic")


def typer_ls() -> TyperCommand:
    return COMMANDS["ls"].load("ls")


def kind_of(param: Any) -> str:
    """The quick parser's kind for a Click parameter of the Typer command."""
    type_names = {kind.__name__ for kind in type(param.type).__mro__}
    if param.is_flag:
        return FLAG
    if param.multiple:
        return TEXTS
    if "IntRange" in type_names:
        return POSITIVE if param.type.min == 1 else NUMBER
    if "IntParamType" in type_names:
        return NUMBER
    if "Choice" in type_names or "TyperChoice" in type_names:
        return OUTPUT
    return TEXT


def test_the_quick_options_are_the_typer_commands_own() -> None:
    command, options = typer_ls(), QUICK["ls"].options
    defaults = inspect.signature(list_jobs).parameters
    typer_options = {}
    for param in command.params:
        if param.name == "help":
            continue
        for name in param.opts:
            typer_options[name] = (param.name, kind_of(param))
        default = param.default.value if isinstance(param.default, Output) else param.default
        quick_default = defaults[param.name].default
        assert (quick_default.value if isinstance(quick_default, Output) else quick_default) == (
            default
        )
    assert dict(options) == typer_options


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-a"],
        ["--all", "-s", "running", "--status=pending", "-s", "failed"],
        ["--team", "ml", "--user=alice", "--limit", "5"],
        ["--array", "12", "-o", "json"],
        ["--output=table", "--limit=1"],
        ["--team="],
    ],
)
def test_what_the_quick_parser_takes_typer_parses_alike(args: list[str]) -> None:
    params = QUICK["ls"].parse(args)
    assert params is not None
    typer_params = typer_ls().make_context("ls", list(args)).params
    for name, value in typer_params.items():
        expected = params.get(name, inspect.signature(list_jobs).parameters[name].default)
        if name == "status":
            value, expected = list(value or []), list(expected or [])
        assert value == expected, name


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "--help"],
        ["ls", "-as", "running"],  # short flags run together
        ["ls", "-srunning"],
        ["ls", "--limit", "0"],
        ["ls", "--limit", "+5"],
        ["ls", "--limit"],
        ["ls", "--team", "-a"],  # a value like an option
        ["ls", "--team", "a", "--team", "b"],  # twice
        ["ls", "-a", "--all"],
        ["ls", "--all=yes"],
        ["ls", "-o", "JSON"],
        ["ls", "-o", "yaml"],
        ["ls", "12"],
        ["ls", "--"],
        ["ls", "--stat", "running"],
        ["show", "12"],
        ["--version"],
        [],
    ],
)
def test_anything_else_goes_to_typer(args: list[str]) -> None:
    assert quick(args) is None


def test_shell_completion_goes_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert quick(["ls"]) is not None
    monkeypatch.setenv("_GPUPOOL_COMPLETE", "complete_bash")
    assert quick(["ls"]) is None


class Jobs(BaseHTTPRequestHandler):
    """A server with no job: [] to every GET."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Jobs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


LOADED = """
import sys
sys.argv = ["gpupool", *sys.argv[1:]]
from gpupool.main import main
try:
    main()
except SystemExit as exit:
    code = exit.code
print(code, sorted(name for name in sys.modules if name in NAMES), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["ls"], ["ls", "-a", "-o", "json"]])
def test_gpupool_ls_loads_neither_typer_nor_rich(server_url: str, args: list[str]) -> None:
    program = LOADED.replace("NAMES", repr(NOT_LOADED))
    env = {"GPUPOOL_URL": server_url, "GPUPOOL_TOKEN": "gpt_x", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", program, *args], env=env, capture_output=True, text=True, timeout=60
    )
    code, loaded = done.stderr.strip().split(" ", 1)
    assert (code, json.loads(loaded.replace("'", '"'))) == ("0", [])
    listed = "ID  NAME  USER  TEAM  STATUS  GPUS  NODE  AGE  REASON\n"
    assert done.stdout == (listed if args == ["ls"] else "[]\n")
