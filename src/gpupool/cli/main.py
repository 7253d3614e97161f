"""The gpupool CLI (Typer + Rich). It talks to the server only through ``gpupool.client``."""

from __future__ import annotations

import typer

from gpupool.cli import admin, jobs, nodes, queue, session
from gpupool.cli.output import CliGroup

app = typer.Typer(
    name="gpupool",
    help="gpupool: run jobs on a shared GPU pool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=CliGroup,
)

app.command("login")(session.login)
app.command("whoami")(session.whoami)
app.command("run", context_settings=jobs.RUN_SETTINGS)(jobs.run)
app.command("ls")(jobs.ls)
app.command("show")(jobs.show)
app.command("logs")(jobs.logs)
app.command("cancel")(jobs.cancel)
app.command("why")(jobs.why)
app.command("queue")(queue.queue)
app.command("nodes")(nodes.nodes)
app.add_typer(admin.users_app, name="users")
app.add_typer(admin.teams_app, name="team")
app.add_typer(admin.teams_app, name="teams", hidden=True)  # the name before quotas came
app.add_typer(admin.tokens_app, name="tokens")
