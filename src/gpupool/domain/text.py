"""Text that gpupool stores: valid Unicode without NUL, checked once at the edge.

A string holding NUL or a lone surrogate (JSON "\\ud800") cannot be kept: PostgreSQL refuses
NUL (SQLite truncates at it) and no surrogate can be written as UTF-8, so one such string
would break every listing that shows it. ``Text`` refuses both wherever a request carries
text; ``ShownText`` mends text read back from rows stored before that check existed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"
STORED = "stored"  # validation context key: the data was read back, not sent


def stored_context() -> dict[str, bool]:
    """The validation context for data read back from the database: rules added after it
    was accepted are not applied again (it was valid when it came in)."""
    return {STORED: True}


def is_stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(STORED))


def check_storable(value: Any, info: ValidationInfo) -> Any:
    """Refuse a string holding NUL or a lone surrogate; anything else goes on to the field's
    own validation (a non-string gets that field's usual "should be a string" error)."""
    if not isinstance(value, str) or is_stored(info):
        return value
    found = UNSTORABLE.search(value)
    if found is None:
        return value
    raise ValueError(unstorable_problem(found.group(), found.start() + 1))


def unstorable_problem(char: str, position: int) -> str:
    """What is wrong with the unstorable character at ``position`` (from 1), and what to do."""
    if char == "\x00":
        return f"character {position} is NUL (\\u0000), which cannot be stored: remove it"
    return (
        f"character {position} is a lone surrogate ({escape_unstorable(char)}), which is not "
        "valid Unicode: send UTF-8 text (in JSON, a \\ud83d-style escape needs its low half "
        "after it, such as \\ude00)"
    )


def escape_unstorable(text: str) -> str:
    """``text`` with NUL and lone surrogates written as visible escapes (\\u0000, \\ud800),
    for messages that must name what was sent."""
    return UNSTORABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def readable(value: Any) -> Any:
    """``value`` (a string, or lists and dicts of them) with every NUL or lone surrogate
    replaced by U+FFFD, so that rows stored before ``Text`` existed can still be shown."""
    # repr writes both as escapes (\x00, \udXXX): one pass in C clears nearly every value,
    # a third of the cost of walking it (5 us against 15 us for a job's spec, 500 per listing)
    shown = repr(value)
    if "\\x00" not in shown and "\\ud" not in shown:
        return value
    return _mend(value)


def _mend(value: Any) -> Any:
    if isinstance(value, str):
        return UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, list):
        return [_mend(item) for item in value]
    if isinstance(value, dict):
        return {_mend(key): _mend(item) for key, item in value.items()}
    return value


# Put after any length bounds, so that they keep their own messages:
# Annotated[str, Field(max_length=100), STORABLE] | None
STORABLE = BeforeValidator(check_storable)
Text = Annotated[str, STORABLE]
ShownText = Annotated[str, BeforeValidator(readable)]
