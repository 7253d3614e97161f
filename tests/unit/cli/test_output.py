"""The CLI's one escape for text it did not write: what a terminal would act on is shown;
tables printed without Rich where that prints what Rich would."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence

import pytest
from rich.console import Console

from gpupool.cli.output import (
    PIPED_WIDTH,
    TERMINAL_VARIABLES,
    Cell,
    _markup,
    _plain_table,
    escape,
    new_table,
    print_table,
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("clear\x1b[2J", "clear\\x1b[2J"),  # ESC: clears the screen, moves the cursor
        ("over\rwrite", "over\\rwrite"),
        ("bell\x07", "bell\\x07"),
        ("two\nlines\ttab", "two\\nlines\\ttab"),
        ("c1\x9b31m", "c1\\x9b31m"),  # the one-byte CSI of C1
        ("del\x7f", "del\\x7f"),
        ("bidi\u202etxt.exe", "bidi\\u202etxt.exe"),  # reorders what follows
        ("lone\ud800", "lone\\ud800"),  # no UTF-8 terminal takes it
        ("line\u2028sep", "line\\u2028sep"),
        ("plain ünïcødé, 日本, emoji 🚀", "plain ünïcødé, 日本, emoji 🚀"),
    ],
)
def test_control_characters_are_shown_as_escapes(text: str, shown: str) -> None:
    assert rendered(escape(text)) == shown


def test_rich_markup_in_server_text_is_printed_as_it_is() -> None:
    assert rendered(escape("[bold]not bold[/bold] \\[x]")) == "[bold]not bold[/bold] \\[x]"


def rendered(markup: str) -> str:
    """What a console prints for ``markup``, without colour codes or a final newline."""
    text = io.StringIO()
    Console(file=text, width=200, highlight=False, color_system=None).print(markup)
    return text.getvalue().removesuffix("\n")


# -- print_table: plain text where Rich would print plain text --------------------------------

COLUMNS = ("ID", "NAME", "USER", "TEAM", "STATUS", "GPUS", "NODE", "AGE", "REASON")
ROW = ["12", "train", "alice", "ml", ("running", "green"), "1", "vm", "3m05s", "-"]


def test_a_listing_is_printed_without_rich_as_rich_prints_it() -> None:
    rows = [ROW, ["12_[0-9%2]", "-", "bob", "vision", "3 pending", "0.5", "-", "0s", "array"]]
    text = _plain_table(COLUMNS, rows)
    assert text is not None
    assert text == rich_table(COLUMNS, rows)
    assert _plain_table(COLUMNS, []) == rich_table(COLUMNS, []) == "  ".join(COLUMNS) + "\n"


def test_markup_and_brackets_are_printed_as_they_are() -> None:
    rows = [["[bold]x[/bold]", "[y]", "[", "]", ":smile:", "@x", "#[a]", "[/]", "a]["]]
    text = _plain_table(COLUMNS, rows)
    assert text is not None and "[bold]x[/bold]" in text
    assert text == rich_table(COLUMNS, rows)


@pytest.mark.parametrize(
    "cell",
    # a backslash: Rich's escape does not give back every one (a\ and \[: prints a\\ and [)
    ["x" * 200, "日本", "émigré", "🚀", " padded", "padded ", "tab\there", "a\\", "\\[:x"],
)
def test_what_plain_text_would_not_print_as_rich_does_is_left_to_rich(cell: str) -> None:
    assert _plain_table(COLUMNS, [[cell, *ROW[1:]]]) is None


def test_a_table_as_wide_as_a_pipe_is_plain_one_wider_is_rich() -> None:
    fits = ["x" * (PIPED_WIDTH - 3), "y"]  # and 2 spaces between the columns
    assert _plain_table(("A", "B"), [fits]) == rich_table(("A", "B"), [fits])
    assert _plain_table(("A", "B"), [["x" * (PIPED_WIDTH - 2), "y"]]) is None


def test_random_tables_print_as_rich_prints_them() -> None:
    chance = random.Random(7)
    letters = "abcXYZ019 _-=()[]/\\@#%:.,'\""
    for _ in range(400):
        width = chance.randint(1, 9)
        columns = [chance.choice(["ID", "NAME", "A", "LONGER HEADER"]) for _ in range(width)]
        rows: list[list[Cell]] = []
        for _ in range(chance.randint(0, 5)):
            row: list[Cell] = []
            for _ in range(width):
                text = "".join(chance.choice(letters) for _ in range(chance.randint(0, 24)))
                row.append((text, "bold green") if chance.random() < 0.2 else text)
            rows.append(row)
        text = _plain_table(columns, rows)
        if text is not None:
            assert text == rich_table(columns, rows), (columns, rows)


def test_print_table_writes_the_plain_table_to_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in TERMINAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    print_table(COLUMNS, [ROW])
    assert capsys.readouterr().out == rich_table(COLUMNS, [ROW])


def rich_table(columns: Sequence[str], rows: list[list[Cell]]) -> str:
    """What the CLI's console for a pipe prints for the table, through Rich."""
    text = io.StringIO()
    console = Console(file=text, width=PIPED_WIDTH, highlight=False, soft_wrap=True, emoji=False)
    table = new_table(*columns)
    for row in rows:
        table.add_row(*(_markup(cell) for cell in row))
    console.print(table)
    return text.getvalue()
