"""Job array indexes as sbatch --array takes them, and as gpupool writes them back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpupool.domain.arrays import MAX_ARRAY_INDEX, ArraySpec, format_indexes, parse_indexes


@pytest.mark.parametrize(
    ("text", "indexes", "limit"),
    [
        ("0-3", [0, 1, 2, 3], None),
        ("1,3,5-7", [1, 3, 5, 6, 7], None),
        ("0-9:3", [0, 3, 6, 9], None),
        ("0-9:4%2", [0, 4, 8], 2),
        ("7", [7], None),
        (" 2-3, 1 %1", [1, 2, 3], 1),
        ("1-5,3-4", [1, 2, 3, 4, 5], None),
    ],
)
def test_sbatch_forms_are_read(text: str, indexes: list[int], limit: int | None) -> None:
    assert parse_indexes(text) == (indexes, limit)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "names no index"),
        ("%4", "names no index"),
        ("a-b", "is not understood"),
        ("1-", "is not understood"),
        ("-1", "is not understood"),
        ("1,,2", "is not understood"),
        ("5-2", "counts down"),
        ("0-9:0", "step of 0"),
        ("0-3%0", "at least %1"),
        (f"0-{MAX_ARRAY_INDEX + 1}", "out of range"),
        ("0-999999", "more than 100,000 tasks"),
    ],
)
def test_malformed_specs_say_what_is_wrong_and_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_indexes(text)


def test_a_spec_string_gives_its_limit_and_a_list_is_sorted_once_each() -> None:
    assert ArraySpec(indexes="0-999%50").max_running == 50
    spec = ArraySpec(indexes=[5, 1, 5, 3], max_running=2)
    assert (spec.tasks, spec.text) == ([1, 3, 5], "1-5:2%2")


def test_two_different_limits_are_refused_and_the_same_one_is_kept() -> None:
    with pytest.raises(ValidationError, match="give the limit once"):
        ArraySpec(indexes="0-9%2", max_running=3)
    assert ArraySpec(indexes="0-9%2", max_running=2).max_running == 2


@pytest.mark.parametrize("indexes", [[], [-1], [MAX_ARRAY_INDEX + 1]])
def test_lists_are_checked_like_strings(indexes: list[int]) -> None:
    with pytest.raises(ValidationError):
        ArraySpec(indexes=indexes)


@given(st.sets(st.integers(0, 200), min_size=1, max_size=40))
def test_what_is_written_reads_back_as_the_same_indexes(indexes: set[int]) -> None:
    ordered = sorted(indexes)
    assert parse_indexes(format_indexes(ordered)) == (ordered, None)
