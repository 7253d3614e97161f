"""Commands run without Typer: ``gpupool ls``, the one users run most, in a loop or a watch.

Importing Typer and its Click costs a CLI call about 45 ms, a third of what ``gpupool ls``
takes in all (benchmarks/cli_startup.py). So gpupool.main asks this module first: a quick
command given in the plain forms of its options (``-a``, ``--status running``,
``--team=ml``, ``-o json``) runs here, through the same error boundary as under Typer
(gpupool.cli.output.error_exit_code). Anything else (``--help``, an option misspelt, given
twice or with a doubtful value, shell completion) goes to Typer, which parses and answers it
as always: the two never disagree, this parser only takes less.

This module imports nothing of the CLI until a quick command runs: every other command
passes through it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from importlib import import_module
from types import MappingProxyType
from typing import Any

# kinds of option values: what this parser takes of each (anything else goes to Typer)
FLAG = "flag"  # no value
TEXT = "text"  # one value, not starting with '-'
TEXTS = "texts"  # the same, repeatable: a list
NUMBER = "number"  # ASCII digits
POSITIVE = "positive"  # ASCII digits, at least 1
OUTPUT = "output"  # table or json, as written in gpupool.cli.options.OutputOption's help

Options = Mapping[str, tuple[str, str]]  # option -> (the function's parameter, kind)


class Quick:
    """A command run without Typer: ``target`` ('module:function') takes the parameters that
    ``options`` give, as the command's Typer function does (tests/unit/cli/test_quick.py
    checks that the two agree)."""

    def __init__(self, target: str, options: Options) -> None:
        self.target, self.options = target, options

    def parse(self, args: list[str]) -> dict[str, Any] | None:
        """The parameters ``args`` give, or None for arguments this parser leaves to Typer."""
        params: dict[str, Any] = {}
        remaining = list(args)
        while remaining:
            name, equals, value = remaining.pop(0), False, None
            if name.startswith("--") and "=" in name:
                name, value = name.split("=", 1)
                equals = True
            if name not in self.options:
                return None
            parameter, kind = self.options[name]
            if kind == FLAG:
                if equals:
                    return None
                converted: Any = True
            else:
                if not equals:
                    if not remaining:
                        return None
                    value = remaining.pop(0)
                converted = _value(kind, value or "")
                if converted is None:
                    return None
            if kind == TEXTS:
                params.setdefault(parameter, []).append(converted)
            elif parameter in params:
                return None
            else:
                params[parameter] = converted
        return params

    def run(self, params: dict[str, Any]) -> int:
        """Run the command within the CLI's error boundary; its exit code."""
        from gpupool.cli.output import Output, error_exit_code

        module, _, name = self.target.partition(":")
        function = getattr(import_module(module), name)
        if "output" in params:
            params = params | {"output": Output(params["output"])}
        try:
            function(**params)
        except (Exception, KeyboardInterrupt) as error:
            code = error_exit_code(error)
            if code is None:
                raise
            return code
        return 0


QUICK: Mapping[str, Quick] = MappingProxyType(
    {
        "ls": Quick(
            "gpupool.cli.listing:list_jobs",
            MappingProxyType(
                {
                    "--all": ("all_", FLAG),
                    "-a": ("all_", FLAG),
                    "--status": ("status", TEXTS),
                    "-s": ("status", TEXTS),
                    "--team": ("team", TEXT),
                    "--user": ("user", TEXT),
                    "--limit": ("limit", POSITIVE),
                    "--array": ("array", NUMBER),
                    "--output": ("output", OUTPUT),
                    "-o": ("output", OUTPUT),
                }
            ),
        ),
    }
)


def quick(args: list[str]) -> Callable[[], int] | None:
    """``args`` (the command line after ``gpupool``) ready to run without Typer, returning
    the exit code; None when Typer is to run them."""
    command = QUICK.get(args[0]) if args else None
    if command is None or any(_completing(name) for name in os.environ):
        return None
    params = command.parse(args[1:])
    if params is None:
        return None
    return lambda: command.run(params)


def _value(kind: str, value: str) -> Any:
    """``value`` as the parameter takes it, None for one left to Typer."""
    if value.startswith("-"):
        return None
    if kind in (TEXT, TEXTS):
        return value
    if kind in (NUMBER, POSITIVE):
        if not (value.isascii() and value.isdigit()):
            return None
        number = int(value)
        return None if kind == POSITIVE and number < 1 else number
    if kind == OUTPUT:
        return value if value in ("table", "json") else None
    return None


def _completing(variable: str) -> bool:
    """A shell asks for completions (Click's _PROG_COMPLETE): Typer answers."""
    return variable.startswith("_") and variable.endswith("_COMPLETE")
