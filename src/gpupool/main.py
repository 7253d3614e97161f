"""The ``gpupool`` command: the client CLI plus ``server`` and ``db`` for operators."""

from __future__ import annotations

from gpupool.cli.main import app
from gpupool.server import db_app, serve
from gpupool.sim.cli import simulate

app.command("server")(serve)
app.add_typer(db_app, name="db")
app.command("simulate")(simulate)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
