"""The top-level command table: what `gpupool --help` lists without loading a command must be
what each command says of itself; unknown commands get the commands meant."""

from __future__ import annotations

import inspect

import pytest

from gpupool.cli import jobs
from gpupool.cli.main import COMMANDS, NODE_COMMANDS, Lazy, no_such_command
from gpupool.main import OPERATOR_COMMANDS

EVERY = {**COMMANDS} | {name: Lazy(*entry) for name, entry in OPERATOR_COMMANDS.items()}


@pytest.mark.parametrize("name", sorted(EVERY))
def test_a_listed_help_line_is_the_commands_own(name: str) -> None:
    entry = EVERY[name]
    command = entry.load(name)
    first_paragraph = inspect.cleandoc(command.help or "").split("\n\n")[0]
    assert entry.help == " ".join(first_paragraph.split())
    assert (command.name, command.hidden) == (name, entry.hidden)


@pytest.mark.parametrize("name", sorted(NODE_COMMANDS))
def test_a_node_sub_commands_listed_help_line_is_its_own(name: str) -> None:
    entry = NODE_COMMANDS[name]
    command = entry.load(name)
    first_paragraph = inspect.cleandoc(command.help or "").split("\n\n")[0]
    assert entry.help == " ".join(first_paragraph.split())
    assert command.name == name


def test_run_keeps_the_options_after_its_command_for_the_command() -> None:
    command = COMMANDS["run"].load("run")
    parsed = command.make_context("run", ["--gpus", "1", "python", "train.py", "--gpus", "2"])
    assert parsed.params["gpus"] == 1
    assert command.context_settings == jobs.RUN_SETTINGS


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("submit", "Did you mean 'run'?"),
        ("status", "Did you mean 'ls' or 'show'?"),
        ("Submit", "Did you mean 'run'?"),
        ("qeueu", "Did you mean 'queue'?"),
        ("xyzzy", "'gpupool --help' lists them"),
    ],
)
def test_an_unknown_command_names_the_commands_meant(typed: str, meant: str) -> None:
    message = no_such_command(typed, [name for name in COMMANDS if name != "teams"])
    assert message.startswith(f"No such command '{typed}'")
    assert meant in message
