"""The composition root: ``gpupool server`` and ``gpupool db``, wiring settings to the app."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

import gpupool

# The server's heavy modules (uvicorn, SQLAlchemy, Alembic, the app) are imported inside the
# commands, so that every other CLI command starts fast.

console = Console(stderr=True)
db_app = typer.Typer(help="Database schema: upgrade, current revision.", no_args_is_help=True)


def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765).")] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Data directory (GPUPOOL_DATA_DIR).")
    ] = None,
    declare_gpus: Annotated[
        str | None,
        typer.Option(
            help="GPUs to declare where no NVIDIA driver answers, e.g. 4xA100-SXM4-80GB:80GiB."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning.")] = "info",
) -> None:
    """Run the gpupool server (API, web UI, scheduler) in the foreground."""
    from gpupool.settings import Settings

    overrides = {"host": host, "port": port, "data_dir": data_dir, "declared_gpus": declare_gpus}
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # it narrates every step at INFO
    import uvicorn

    from gpupool.api.app import create_app
    from gpupool.errors import SchemaMismatch
    from gpupool.services.platform import open_platform

    try:
        platform = open_platform(settings)
    except SchemaMismatch as error:
        console.print(f"[red]error:[/red] {error.message}")
        raise typer.Exit(2) from error
    _banner(settings, platform.first_start)
    _isolation_banner(platform.isolation())
    app = create_app(platform)
    try:
        uvicorn.run(
            app, host=settings.host, port=settings.port, log_level=log_level, access_log=False
        )
    finally:
        platform.close()


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the database to this gpupool's schema (a SQLite file is backed up first)."""
    from gpupool.settings import Settings
    from gpupool.store import db as store

    settings = Settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    store.upgrade(settings.database)
    console.print(f"database at revision {store.head_revision()}")


@db_app.command("current")
def db_current() -> None:
    """Print the database's schema revision and the one this gpupool needs."""
    from gpupool.settings import Settings
    from gpupool.store import db as store

    database = store.Database(Settings().database)
    console.print(
        f"current: {store.current_revision(database.engine)}  needed: {store.head_revision()}"
    )


def _isolation_banner(status) -> None:  # noqa: ANN001 - IsolationStatus | None
    """Say how jobs are kept apart; loudly when they are not (README "Isolation")."""
    if status is None:
        return
    from gpupool.domain.isolation import IsolationMode

    if status.mode == IsolationMode.SANDBOX:
        console.print(f"isolation: {status.message}", soft_wrap=True)
    elif status.mode == IsolationMode.OFF:
        console.print(f"[bold yellow]WARNING[/bold yellow] {status.message}", soft_wrap=True)
    else:
        text = f"[bold red]ERROR[/bold red] {status.message}. Jobs wait until then."
        console.print(text, soft_wrap=True)


def _banner(settings, first) -> None:  # noqa: ANN001
    url = f"http://{settings.host}:{settings.port}"
    lines = [f"gpupool {gpupool.__version__} serving {url}  (data in {settings.data_dir})"]
    if first is not None:
        lines += [
            "",
            "First start: an admin user was created. Its API token is shown once:",
            "",
            f"    {first.token}",
            "",
            f"CLI:     gpupool login {url} --token {first.token}",
            f"Web UI:  {url}/  (user '{first.user}'; the token works as its password until you",
            f"         set one: gpupool users set-password {first.user})",
            "",
        ]
    print("\n".join(lines), flush=True)
