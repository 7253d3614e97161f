"""The gpupool CLI (Typer + Rich). It talks to the server only through ``gpupool.client``."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="gpupool",
    help="gpupool: run jobs on a shared GPU pool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
