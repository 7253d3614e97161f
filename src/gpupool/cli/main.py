"""The gpupool CLI (Typer + Rich). It talks to the server only through ``gpupool.client``.

Most of what a CLI call costs is start-up, so the top-level group loads a command's module
only when that command runs: ``gpupool ls`` imports neither the admin commands nor the
server. ``--help`` and shell completion list every command from the table below without
importing any (benchmarks/cli_startup.py has the figures).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

try:
    from typer.exceptions import TyperException as UsageProblem
except ImportError:  # Typer before it vendored Click
    from click import ClickException as UsageProblem

from gpupool.cli.output import error_exit_code

HELP = "gpupool: run jobs on a shared GPU pool."
LISTING = "gpupool.listing"  # ctx.meta key: commands are only listed (help, completion)
Command = Any  # click's Command: Typer's own copy of click in newer Typer, else click's


@dataclass(frozen=True)
class Lazy:
    """A command known by its help line until it runs. ``target`` ('module:attribute') is a
    function (one command) or a Typer app (a group of sub-commands)."""

    target: str
    help: str
    hidden: bool = False
    context_settings: Mapping[str, Any] = field(default_factory=dict)

    def load(self, name: str) -> Command:
        """Import the target and build its command exactly as Typer registers it."""
        module, _, attribute = self.target.partition(":")
        found = getattr(import_module(module), attribute)
        parent = typer.Typer(add_completion=False)
        parent.callback()(_nothing)  # a group, so that one command is built as a sub-command
        if isinstance(found, typer.Typer):
            parent.add_typer(found, name=name, hidden=self.hidden)
        else:
            settings = dict(self.context_settings) or None
            parent.command(name, hidden=self.hidden, context_settings=settings)(found)
        return typer.main.get_command(parent).commands[name]

    def placeholder(self, name: str) -> TyperCommand:
        """What a listing shows: the name and the help line."""
        return TyperCommand(name, help=self.help, hidden=self.hidden)


# The commands of users (gpupool.main adds the operators'); help: the first paragraph of each
# command's own help (tests/unit/cli/test_main.py checks they agree).
COMMANDS: Mapping[str, Lazy] = MappingProxyType(
    {
        "login": Lazy(
            "gpupool.cli.session:login",
            "Check a token against a server and save both for later commands (mode 0600).",
        ),
        "whoami": Lazy(
            "gpupool.cli.session:whoami",
            "Show the user the saved token belongs to, its role and teams.",
        ),
        "passwd": Lazy(
            "gpupool.cli.session:passwd",
            "Change your own web UI password (asks the current one first).",
        ),
        "run": Lazy(
            "gpupool.cli.jobs:run",
            "Submit a job: gpupool run --gpus 1 -- python train.py. Prints the job id.",
            context_settings=MappingProxyType({"allow_interspersed_args": False}),
        ),
        "apply": Lazy(
            "gpupool.cli.jobfiles:apply",
            "Make the Jobs, Environments, Datasets, Volumes, Notebooks, Deployments and "
            "Experiments of a job file, all in one transaction; Kubeflow manifests too.",
        ),
        "sbatch": Lazy(
            "gpupool.cli.sbatch:sbatch",
            "Submit a Slurm batch script: its #SBATCH lines become the job's fields; prints "
            "its id.",
        ),
        "ls": Lazy(
            "gpupool.cli.jobs:ls", "List jobs (by default those pending, starting or running)."
        ),
        "show": Lazy(
            "gpupool.cli.jobs:show",
            "Show one job: spec, placement, status, exit code, attempts and events.",
        ),
        "logs": Lazy(
            "gpupool.cli.jobs:logs",
            "Print a job's log, attempt after attempt; with -f, keep printing until the job "
            "has ended. A preempted job's next attempt is announced on stderr.",
        ),
        "cancel": Lazy(
            "gpupool.cli.jobs:cancel",
            "Cancel jobs: pending ones at once, running ones are stopped.",
        ),
        "hold": Lazy(
            "gpupool.cli.holds:hold",
            "Hold pending jobs: they wait (reason Held) and never start until released.",
        ),
        "release": Lazy(
            "gpupool.cli.holds:release",
            "Release held jobs: back to the queue (gpupool run --hold, gpupool hold).",
        ),
        "metrics": Lazy(
            "gpupool.cli.metrics:metrics",
            "Show a job's metrics: each one's last value, min, max and points; -o json or csv "
            "for every point, per attempt (gpu.N.utilization and gpu.N.memory_used: its GPUs' "
            "samples).",
        ),
        "why": Lazy(
            "gpupool.cli.jobs:why",
            "Why a job waits: reason, place in its team's queue, what blocks it, estimated start.",
        ),
        "queue": Lazy(
            "gpupool.cli.queue:queue",
            "Show the jobs waiting for GPUs, team by team, in queue order, with estimated starts.",
        ),
        "nodes": Lazy(
            "gpupool.cli.nodes:nodes",
            "List nodes: CPUs, memory, and each GPU with its domain, used share and holders; "
            "then how jobs are kept apart (isolation).",
        ),
        "node": Lazy(
            "gpupool.cli.nodes:node_app",
            "One node of the pool: show it; drain, undrain or remove it (admins).",
        ),
        "users": Lazy("gpupool.cli.admin:users_app", "Users of the pool (admins only)."),
        "team": Lazy(
            "gpupool.cli.admin:teams_app",
            "Teams and their GPU quotas: jobs are charged to, and visible within, a team.",
        ),
        "teams": Lazy(  # the name before quotas came
            "gpupool.cli.admin:teams_app",
            "Teams and their GPU quotas: jobs are charged to, and visible within, a team.",
            hidden=True,
        ),
        "tokens": Lazy(
            "gpupool.cli.admin:tokens_app", "API tokens (yours; an admin's: everyone's)."
        ),
        "notebook": Lazy(
            "gpupool.cli.notebooks:notebook_app",
            "Notebooks: a JupyterLab of yours in your workspace, behind the server's sign-in; "
            "start, list, show, open, stop and resume them.",
        ),
        "model": Lazy(
            "gpupool.cli.models:model_app",
            "The model registry: versions of your teams' models, registered from jobs' outputs.",
        ),
        "dataset": Lazy(
            "gpupool.cli.datasets:dataset_app",
            "Datasets: immutable, numbered versions of your teams' data, mounted read-only in "
            "jobs (gpupool run --dataset NAME[:VERSION][:/MOUNT]).",
        ),
        "volume": Lazy(
            "gpupool.cli.datasets:volume_app",
            "Volumes: your teams' mutable directories, mounted read-write in jobs (gpupool run "
            "--volume NAME:/MOUNT), counted in the team's storage quota.",
        ),
        "experiment": Lazy(
            "gpupool.cli.experiments:experiment_app",
            "Experiments: hyper-parameter searches whose trials are jobs (made with gpupool "
            "apply -f of a kind Experiment); list, show, pause, resume, stop, best.",
        ),
        "scheduler": Lazy(
            "gpupool.cli.scheduler:scheduler_app",
            "The scheduler's live settings (LAS levels, starvation, minimum runtime, fair-share "
            "half-life, packing, order): show them; admins change them, read their history, "
            "roll back, and tune them by replaying the pool's own history.",
        ),
        "history": Lazy(
            "gpupool.cli.tuning:history_app",
            "The pool's history (admins): export it as a trace that gpupool simulate and the "
            "tuner replay.",
        ),
        "image": Lazy(
            "gpupool.cli.images:image_app",
            "Container images: pull from a registry the site allows, import an archive, list "
            "and remove your teams' images; run a job in one with gpupool run --image.",
        ),
        "env": Lazy(
            "gpupool.cli.environments:env_app",
            "Python environments: your teams' locked sets of packages (make one from "
            "requirements.txt, pyproject.toml or uv.lock); run a job in one with gpupool run "
            "--env NAME.",
        ),
        "deploy": Lazy(
            "gpupool.cli.deployments:deploy_app",
            "Serve a registered model with replicas at /serve/NAME/: gpupool deploy "
            "NAME[:VERSION] --replicas 2; list, show, scale, update and stop deployments; "
            "their keys.",
        ),
    }
)

# The sub-commands of `gpupool node`, each loaded only when it runs (as the commands above).
# `gpupool node join` is an operator's command in gpupool.server (it starts a Ray node, so it is
# not the client's): named here by its place, imported only when it runs.
NODE_COMMANDS: Mapping[str, Lazy] = MappingProxyType(
    {
        "show": Lazy(
            "gpupool.cli.nodes:show",
            "Show one node: its state, drain, join time, fabric group, GPUs and latest changes.",
        ),
        "drain": Lazy(
            "gpupool.cli.nodes:drain",
            "Keep new work off a node (admins): nothing new is placed there; what runs there "
            "goes on to its end.",
        ),
        "undrain": Lazy(
            "gpupool.cli.nodes:undrain",
            "Let new work on a drained node again, or a removed one back (admins).",
        ),
        "remove": Lazy(
            "gpupool.cli.nodes:remove",
            "Take a node out of the pool (admins); refused while jobs hold resources on it.",
        ),
        "join": Lazy(  # an operator's command on the joining machine (it starts a Ray node)
            "gpupool.server:node_join",
            "Join this machine to a pool: start its Ray node, wait until it is schedulable, "
            "then run in the foreground until stopped (Ctrl-C or SIGTERM stops the node).",
        ),
    }
)

# What a new user types for what gpupool calls otherwise (close spellings are found as well).
MEANT: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "submit": ("run",),
        "start": ("run",),
        "exec": ("run",),
        "status": ("ls", "show"),
        "list": ("ls",),
        "ps": ("ls",),
        "jobs": ("ls",),
        "info": ("show",),
        "describe": ("show",),
        "inspect": ("show",),
        "log": ("logs",),
        "tail": ("logs",),
        "kill": ("cancel",),
        "stop": ("cancel",),
        "rm": ("cancel",),
        "delete": ("cancel",),
        "pending": ("why", "queue"),
        "gpus": ("nodes",),
        "password": ("passwd",),
        "version": ("--version",),
        "serve": ("server",),
    }
)


class CliGroup(TyperGroup):
    """The top-level group: its ``invoke`` is the error boundary of every command (what it
    does with an error: gpupool.cli.output.error_exit_code)."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, UsageProblem):
            raise
        except (Exception, KeyboardInterrupt) as error:
            code = error_exit_code(error)
            if code is None:
                raise
            raise typer.Exit(code) from None


class LazyGroup(CliGroup):
    """The top-level group over a table of ``Lazy`` commands, loading one only to run it."""

    table: Mapping[str, Lazy] = MappingProxyType({})  # a subclass's own: see group_over

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Command | None:
        entry = self.table.get(cmd_name)
        if entry is None:
            return None
        if ctx.meta.get(LISTING):
            return entry.placeholder(cmd_name)
        if cmd_name not in self.commands:
            self.commands[cmd_name] = entry.load(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        with listing(ctx):
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: typer.Context, incomplete: str) -> list[Any]:
        with listing(ctx):
            return super().shell_complete(ctx, incomplete)

    def resolve_command(
        self, ctx: typer.Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except UsageProblem as error:
            if args and not args[0].startswith("-") and args[0] not in self.table:
                error.message = no_such_command(args[0], self.visible())
            raise

    def visible(self) -> list[str]:
        return [name for name, entry in self.table.items() if not entry.hidden]


def app_for(commands: Mapping[str, Lazy], version: str) -> typer.Typer:
    """The ``gpupool`` app over ``commands``, with ``--version`` printing ``version``."""

    def show_version(wanted: bool) -> None:
        if wanted:
            typer.echo(version)
            raise typer.Exit()

    app = typer.Typer(
        name="gpupool",
        help=HELP,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        cls=group_over(commands),
    )

    @app.callback()
    def top(
        _version: bool = typer.Option(
            False,
            "--version",
            help="Print the version and exit.",
            callback=show_version,
            is_eager=True,
        ),
    ) -> None:
        """The options of every command; the commands are in the group's table."""

    return app


def group_over(commands: Mapping[str, Lazy]) -> type[LazyGroup]:
    """A LazyGroup class over ``commands``: Typer makes the group from a class."""
    return type("GpupoolGroup", (LazyGroup,), {"table": MappingProxyType(dict(commands))})


def no_such_command(name: str, known: list[str]) -> str:
    """The message for an unknown command: the commands meant, or where to look."""
    meant = MEANT.get(name.lower()) or tuple(difflib.get_close_matches(name, known, n=3))
    if not meant:
        return f"No such command '{name}': 'gpupool --help' lists them."
    quoted = [f"'{option}'" for option in meant]
    options = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"No such command '{name}'. Did you mean {options}?"


@contextmanager
def listing(ctx: typer.Context) -> Iterator[None]:
    """Within: ``get_command`` gives placeholders, for a listing that imports nothing."""
    ctx.meta[LISTING] = True
    try:
        yield
    finally:
        ctx.meta.pop(LISTING, None)


def _nothing() -> None:
    """The callback of a group built only to build one command."""
