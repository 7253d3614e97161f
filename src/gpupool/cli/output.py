"""Shared rendering for the CLI, and its one error boundary.

Everything the user asked for goes to stdout (tables, ids, JSON, logs); spinners, notes and
errors go to stderr. An ``ApiError`` or ``CliError`` becomes one red line
``error [code]: message`` on stderr and exit code 1; usage errors exit 2 (Typer's own).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table
from typer.core import TyperGroup

try:
    from typer.exceptions import TyperException as UsageProblem
except ImportError:  # Typer before it vendored Click
    from click import ClickException as UsageProblem

from gpupool.client import ApiError
from gpupool.domain.units import format_bytes

if TYPE_CHECKING:
    from pydantic import ValidationError

MAX_ERROR = 500  # characters of an error message shown
PIPED_WIDTH = 200  # tables written to a pipe or file are not folded at 80 columns
# What a terminal acts on instead of showing: C0 and C1 controls (ESC clears the screen or
# moves the cursor, CR overwrites the line, BEL rings), DEL, line and paragraph separators,
# bidi overrides (they reorder what follows), and lone surrogates (no UTF-8 terminal takes one)
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
NAMED_CONTROLS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

out = Console(highlight=False, soft_wrap=True, emoji=False)
if not out.is_terminal:
    out = Console(highlight=False, soft_wrap=True, emoji=False, width=PIPED_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


class Output(StrEnum):
    """How a command prints what it found."""

    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (default) or json.", case_sensitive=False)
]


class CliError(Exception):
    """A failure detected by the CLI itself (not logged in, a bad config file...)."""

    def __init__(self, code: str, message: str, exit_code: int = 1) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.exit_code = code, message, exit_code


def escape(text: object) -> str:
    """Text the CLI did not write itself (names, commands, messages, anything from the
    server) made safe to print in Rich markup: control characters shown as visible escapes
    (ESC as \\x1b, CR as \\r), never acted on by the terminal, and markup escaped. The CLI
    uses this instead of Rich's own ``escape``; only a job's log (``gpupool logs``) is printed
    as it is, since it is the job's own output."""
    return markup_escape(CONTROL.sub(_visible, str(text)))


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in NAMED_CONTROLS:
        return NAMED_CONTROLS[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def report_error(code: str, message: str) -> None:
    """Print the one-line form of an error on stderr (whitespace folded, long text cut)."""
    line = " ".join(str(message).split())
    if len(line) > MAX_ERROR:
        line = line[: MAX_ERROR - 1] + "…"
    err.print(f"[red]error \\[{escape(code)}]: {escape(line)}[/red]")


def settings_problem(error: ValidationError) -> str:
    """The bad GPUPOOL_* variables and what each should be."""
    problems = [
        f"GPUPOOL_{'_'.join(str(part) for part in item['loc']).upper()}: {item['msg']}"
        for item in error.errors()
    ]
    return "; ".join(problems) + " (fix the environment variable and start again)"


def settings_problem_of(error: Exception) -> str | None:
    """``settings_problem`` if ``error`` is the validation error of gpupool's settings."""
    from pydantic import ValidationError  # here: most commands never load pydantic (40 ms)

    if isinstance(error, ValidationError) and error.title == "Settings":
        return settings_problem(error)
    return None


class CliGroup(TyperGroup):
    """The top-level group: its ``invoke`` is the error boundary of every command."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as error:
            report_error(error.code, error.message)
            raise typer.Exit(1) from None
        except CliError as error:
            report_error(error.code, error.message)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader left (gpupool logs -f 12 | head): nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
            raise typer.Exit(1) from None
        except (typer.Exit, typer.Abort, UsageProblem):
            raise
        except Exception as error:  # bad settings, or a bug or a surprise: one line
            if (problem := settings_problem_of(error)) is not None:
                report_error("bad_setting", problem)
                raise typer.Exit(2) from None
            if os.environ.get("GPUPOOL_DEBUG"):
                raise
            name = type(error).__name__
            report_error("unexpected", f"{name}: {error} (GPUPOOL_DEBUG=1 shows more)")
            raise typer.Exit(1) from None


# -- plain output ----------------------------------------------------------------------------


def print_json(data: Any) -> None:
    """Print plain JSON on stdout and nothing else."""
    typer.echo(json.dumps(data, indent=2))


def new_table(*columns: str) -> Table:
    """A borderless table with the given upper-case headers."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


# -- values ----------------------------------------------------------------------------------


def timestamp(value: float | None) -> str:
    """A Unix time as local 'YYYY-MM-DD HH:MM:SS', or '-'."""
    if value is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


def duration(seconds: float | None) -> str:
    """A compact duration: 42s, 3m05s, 2h07m, 4d03h."""
    if seconds is None:
        return "-"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def age(since: float | None, until: float | None = None) -> str:
    """The time from ``since`` to ``until`` (default: now)."""
    if since is None:
        return "-"
    return duration((until if until is not None else time.time()) - since)


def share(value: float) -> str:
    """A GPU count or share without a useless '.0': 1, 0.5, 0.25."""
    return f"{value:g}"


def memory(count: int | None) -> str:
    """A byte count with binary units ('80 GiB'), '-' when absent."""
    return format_bytes(count)


STATUS_STYLE = {
    "pending": "yellow",
    "starting": "cyan",
    "running": "green",
    "succeeded": "bold green",
    "failed": "red",
    "cancelled": "magenta",
    "lost": "red",
}


def status_text(status: str) -> str:
    """The status with Rich colour markup."""
    style = STATUS_STYLE.get(status, "white")
    return f"[{style}]{escape(status)}[/{style}]"
