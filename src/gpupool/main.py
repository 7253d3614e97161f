"""The ``gpupool`` command: the client CLI plus ``server``, ``admin-token``, ``db`` and
``simulate`` for operators.

Only what a command needs is imported: ``--version`` answers before Typer and Rich are
loaded, ``gpupool ls`` runs without Typer (gpupool.cli.quick), and every other command loads
its own module only (gpupool.cli.main.LazyGroup).
"""

from __future__ import annotations

import sys
from types import MappingProxyType

import gpupool

TYPE_CHECKING = False  # not typing's: importing typing costs --version a third of its time
if TYPE_CHECKING:
    from typing import Any

    import typer

# name -> (where the command is, its help line as `gpupool --help` lists it)
OPERATOR_COMMANDS = MappingProxyType(
    {
        "server": (
            "gpupool.server:serve",
            "Run the gpupool server (API, web UI, scheduler) in the foreground.",
        ),
        "admin-token": (
            "gpupool.server:admin_token",
            "On the server's host: a new API token for an admin, when the first one is lost.",
        ),
        "db": ("gpupool.server:db_app", "Database schema: upgrade, current revision."),
        "simulate": (
            "gpupool.sim.cli:simulate",
            "Replay a trace on a virtual clock through the scheduler and print a metrics table.",
        ),
    }
)


def main() -> None:
    """Run the command line in sys.argv."""
    if sys.argv[1:2] == ["--version"]:
        print(version_line())
        return
    from gpupool.cli.quick import quick  # Typer-free: the commands it runs need no Typer

    if (command := quick(sys.argv[1:])) is not None:
        sys.exit(command())
    build_app()()


def build_app() -> typer.Typer:
    """The ``gpupool`` app: the users' commands and the operators'."""
    from gpupool.cli.main import COMMANDS, Lazy, app_for  # Typer, Rich: --version does without

    operators = {name: Lazy(target, help) for name, (target, help) in OPERATOR_COMMANDS.items()}
    return app_for(COMMANDS | operators, version_line())


def __getattr__(name: str) -> Any:
    """``app``: the app, built when asked for (by tests driving it with typer's CliRunner)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def version_line() -> str:
    return f"gpupool {gpupool.__version__}"


if __name__ == "__main__":
    main()
