"""The CLI's one escape for text it did not write: what a terminal would act on is shown."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpupool.cli.output import escape


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
