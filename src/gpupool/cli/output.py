"""Shared rendering for the CLI, and what its one error boundary does with an error.

Everything the user asked for goes to stdout (tables, ids, JSON, logs); spinners, notes and
errors go to stderr. An ``ApiError`` or ``CliError`` becomes one red line
``error [code]: message`` on stderr and exit code 1; usage errors exit 2 (Typer's own).

This module imports neither Typer nor Rich: ``gpupool ls`` runs without Typer
(gpupool.cli.quick), and Rich is loaded when something is printed through it (``out``,
``err``, ``escape``), not for a table written to a pipe or file (``print_table``). The Typer
side of the boundary is gpupool.cli.main.CliGroup; Typer's options are in gpupool.cli.options.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpupool.client import ApiError
from gpupool.domain.units import format_bytes

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import Console
    from rich.table import Table

MAX_ERROR = 500  # characters of an error message shown
PIPED_WIDTH = 200  # tables written to a pipe or file are not folded at 80 columns
# What a terminal acts on instead of showing: C0 and C1 controls (ESC clears the screen or
# moves the cursor, CR overwrites the line, BEL rings), DEL, line and paragraph separators,
# bidi overrides (they reorder what follows), and lone surrogates (no UTF-8 terminal takes one)
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
NAMED_CONTROLS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# What makes Rich treat a pipe as a terminal (colours, the terminal's width): print_table
# leaves a table to Rich when one of them is set
TERMINAL_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE")

Cell = str | tuple[str, str]  # a cell of print_table: plain text, or (plain text, Rich style)


class LazyConsole:
    """A Rich console made at its first use: a command that prints nothing through it does
    without importing Rich (about 25 ms of a CLI call)."""

    def __init__(self, make: Callable[[], Console]) -> None:
        self._make = make
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = self._make()
        return getattr(self._console, name)


def _stdout_console() -> Console:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True, emoji=False)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=True, emoji=False, width=PIPED_WIDTH)
    return console


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


out: Console = LazyConsole(_stdout_console)  # type: ignore[assignment]
err: Console = LazyConsole(_stderr_console)  # type: ignore[assignment]


class Output(StrEnum):
    """How a command prints what it found."""

    TABLE = "table"
    JSON = "json"


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
    from rich.markup import escape as markup_escape

    return markup_escape(visible(text))


def visible(text: object) -> str:
    """``escape`` without the markup: the text of a cell of ``print_table``."""
    return CONTROL.sub(_visible, str(text))


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


def error_exit_code(error: BaseException) -> int | None:
    """What the CLI's error boundary does with an error a command raised: report it on stderr
    and give the exit code, or None for an error to raise as it is (GPUPOOL_DEBUG's bugs)."""
    if isinstance(error, ApiError):
        report_error(error.code, error.message)
        return 1
    if isinstance(error, CliError):
        report_error(error.code, error.message)
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        err.print("[yellow]interrupted[/yellow]")
        return 130
    if isinstance(error, BrokenPipeError):  # the reader left (gpupool logs -f 12 | head)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
        return 1
    if not isinstance(error, Exception):
        return None
    # bad settings, or a bug or a surprise: one line
    if (problem := settings_problem_of(error)) is not None:
        report_error("bad_setting", problem)
        return 2
    if os.environ.get("GPUPOOL_DEBUG"):
        return None
    name = type(error).__name__
    report_error("unexpected", f"{name}: {error} (GPUPOOL_DEBUG=1 shows more)")
    return 1


# -- plain output ----------------------------------------------------------------------------


def print_json(data: Any) -> None:
    """Print plain JSON on stdout and nothing else."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def new_table(*columns: str) -> Table:
    """A borderless table with the given upper-case headers."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> None:
    """Print a ``new_table`` of these columns and rows on stdout, as ``out.print`` does.

    Cells are plain text (``visible``), not markup. Where Rich would print the table as plain
    text, it is written here, byte for byte the same, without loading Rich: to a pipe or a
    file, with no variable asking for a terminal, printable ASCII cells and a table within
    PIPED_WIDTH (tests/unit/cli/test_output.py compares the two)."""
    rows = [list(row) for row in rows]
    text = _plain_table(columns, rows) if _plain_stdout() else None
    if text is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    table = new_table(*columns)
    for row in rows:
        table.add_row(*(_markup(cell) for cell in row))
    out.print(table)


def _plain_stdout() -> bool:
    """Whether ``out`` is the CLI's own console and Rich would write stdout without colour."""
    if not isinstance(out, LazyConsole) or sys.stdout is None:
        return False
    if any(name in os.environ for name in TERMINAL_VARIABLES):
        return False
    isatty = getattr(sys.stdout, "isatty", None)
    try:
        return isatty is not None and not isatty()
    except ValueError:  # closed
        return False


def _plain_table(columns: Sequence[str], rows: list[list[Cell]]) -> str | None:
    """The table as Rich prints it without colour when every cell is one line of printable
    ASCII without spaces at its ends or a backslash (Rich's markup escape does not give back
    every one) and it fits PIPED_WIDTH; None otherwise."""
    texts = [list(columns)] + [[_text(cell) for cell in row] for row in rows]
    if not columns or any(len(row) != len(columns) for row in texts):
        return None
    for row in texts:
        for text in row:
            plain = text.isascii() and text.isprintable() and "\\" not in text
            if not plain or text != text.strip():
                return None
    widths = [max(len(row[column]) for row in texts) for column in range(len(columns))]
    if sum(widths) + 2 * (len(widths) - 1) > PIPED_WIDTH:
        return None
    return "".join(
        "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)) + "\n"
        for row in texts
    )


def _text(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def _markup(cell: Cell) -> str:
    """A cell as Rich markup: its text escaped, in its style."""
    from rich.markup import escape as markup_escape

    if isinstance(cell, str):
        return markup_escape(cell)
    text, style = cell
    return f"[{style}]{markup_escape(text)}[/{style}]"


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
    return _markup(status_cell(status))


def status_cell(status: str) -> tuple[str, str]:
    """The status as a cell of ``print_table``, in its colour."""
    return visible(status), STATUS_STYLE.get(status, "white")
