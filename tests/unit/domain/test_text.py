"""Text that gpupool stores (``domain.text``): NUL and lone surrogates refused where a request
carries text, with the character's position; rows stored before that rule still read back
(as they were, or mended for showing)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from gpupool.domain.text import (
    REPLACEMENT,
    ShownText,
    Text,
    escape_unstorable,
    readable,
    stored_context,
)


class Sent(BaseModel):
    name: Text
    labels: dict[str, Text] = {}


class Bounded(BaseModel):
    name: Text = Field(max_length=3)


class Shown(BaseModel):
    name: ShownText


def problem(error: ValidationError) -> str:
    return error.errors()[0]["msg"]


def test_plain_unicode_is_kept_as_sent() -> None:
    assert Sent(name="naïve 🚀 日本").name == "naïve 🚀 日本"


def test_a_nul_is_refused_naming_its_position() -> None:
    with pytest.raises(ValidationError) as caught:
        Sent(name="ab\x00c")
    assert "character 3 is NUL (\\u0000), which cannot be stored" in problem(caught.value)


def test_a_lone_surrogate_is_refused_as_invalid_unicode() -> None:
    with pytest.raises(ValidationError) as caught:
        Sent(name="x\ud800")
    message = problem(caught.value)
    assert "character 2 is a lone surrogate (\\ud800)" in message
    assert "send UTF-8 text" in message


def test_text_inside_a_mapping_is_checked_too() -> None:
    with pytest.raises(ValidationError) as caught:
        Sent(name="ok", labels={"team": "a\x00"})
    assert caught.value.errors()[0]["loc"] == ("labels", "team")


def test_a_non_string_gets_the_fields_own_error() -> None:
    with pytest.raises(ValidationError) as caught:
        Sent(name=5)  # type: ignore[arg-type]
    assert caught.value.errors()[0]["type"] == "string_type"


def test_length_bounds_keep_their_own_message() -> None:
    with pytest.raises(ValidationError) as caught:
        Bounded(name="abcd")
    assert caught.value.errors()[0]["type"] == "string_too_long"


def test_a_row_stored_before_the_rule_reads_back_as_it_was() -> None:
    stored = Sent.model_validate({"name": "old\x00row"}, context=stored_context())
    assert stored.name == "old\x00row"


def test_shown_text_mends_what_cannot_be_shown() -> None:
    assert Shown(name="a\x00b\udc00").name == f"a{REPLACEMENT}b{REPLACEMENT}"


def test_readable_mends_lists_and_dicts_keys_included() -> None:
    value = {"k\x00": ["x\ud800", 3, {"y": "z\x00"}], "fine": "ok"}
    assert readable(value) == {
        f"k{REPLACEMENT}": [f"x{REPLACEMENT}", 3, {"y": f"z{REPLACEMENT}"}],
        "fine": "ok",
    }


def test_readable_hands_back_clean_values_themselves() -> None:
    value = {"spec": ["python", "train.py"], "env": {"A": "1"}}
    assert readable(value) is value
    written_out = {"note": "a\\x00 or \\ud800 written out is no NUL nor surrogate"}
    assert readable(written_out) == written_out


def test_escape_unstorable_writes_what_was_sent_visibly() -> None:
    assert escape_unstorable("a\x00b\ud83d") == "a\\u0000b\\ud83d"


@given(st.text())
def test_any_text_either_passes_as_is_or_is_refused_and_mends_to_storable(text: str) -> None:
    unstorable = "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    try:
        assert Sent(name=text).name == text
        assert not unstorable
    except ValidationError:
        assert unstorable
    mended = Shown(name=text).name
    assert len(mended) == len(text)
    Sent(name=mended)  # what is shown can be stored
